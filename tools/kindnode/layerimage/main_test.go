package main

import (
	"archive/tar"
	"errors"
	"io"
	"os"
	"path"
	"path/filepath"
	"reflect"
	"runtime"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// tree makes the files the tests put into images: a program, and a
// directory with a file, a subdirectory and a symbolic link.
func tree(t *testing.T) (program, dir string) {
	t.Helper()
	root := t.TempDir()
	program = filepath.Join(root, "tool")
	write(t, program, "#!/bin/true\n", 0o755)
	dir = filepath.Join(root, "conf")
	write(t, filepath.Join(dir, "a.yaml"), "alpha: 1\n", 0o644)
	write(t, filepath.Join(dir, "sub", "b.txt"), "beta", 0o600)
	if err := os.Symlink("a.yaml", filepath.Join(dir, "current")); err != nil {
		t.Fatal(err)
	}
	return program, dir
}

func write(t *testing.T, p, content string, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil { // past the umask
		t.Fatal(err)
	}
}

// load reads an archive layerimage wrote, as docker load would: the image
// under tag, its config, and its one layer's entries in order.
func load(t *testing.T, archive, tag string) (v1.Image, *v1.ConfigFile, []*tar.Header, map[string]string) {
	t.Helper()
	ref, err := name.NewTag(tag)
	if err != nil {
		t.Fatal(err)
	}
	img, err := tarball.ImageFromPath(archive, &ref)
	if err != nil {
		t.Fatalf("the archive has no image %s: %v", tag, err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	if len(layers) != 1 {
		t.Fatalf("%d layers, want 1", len(layers))
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	var headers []*tar.Header
	contents := map[string]string{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		headers = append(headers, h)
		contents[h.Name] = string(b)
	}
	return img, cf, headers, contents
}

// TestImage: the archive holds one image under the tag given, for this
// platform, with the entrypoint, arguments, user and environment given,
// created at the fixed time; its one layer holds each DEST=SRC at DEST
// with SRC's content, permissions and link target, owned by root, every
// parent directory once and before what it holds, every time the fixed
// one.
func TestImage(t *testing.T) {
	program, dir := tree(t)
	out := filepath.Join(t.TempDir(), "img.tar")
	const tag = "registry.example.test/team/tool:v1.2.3"
	if err := run([]string{"-o", out, "-tag", tag, "-entrypoint", "/usr/local/bin/tool,--config,/etc/tool",
		"-cmd", "serve", "-user", "65532:65532", "-env", "A=1", "-env", "B=two words",
		"/usr/local/bin/tool=" + program, "/etc/tool=" + dir}); err != nil {
		t.Fatalf("run: %v", err)
	}
	if _, err := os.Stat(out + ".tmp"); !os.IsNotExist(err) {
		t.Errorf("the temporary archive is left behind: %v", err)
	}
	m, err := tarball.LoadManifest(func() (io.ReadCloser, error) { return os.Open(out) })
	if err != nil {
		t.Fatal(err)
	}
	if len(m) != 1 || !reflect.DeepEqual(m[0].RepoTags, []string{tag}) {
		t.Errorf("manifest: %+v, want one image tagged %s", m, tag)
	}

	_, cf, headers, contents := load(t, out, tag)
	if cf.OS != "linux" || cf.Architecture != runtime.GOARCH {
		t.Errorf("platform %s/%s, want linux/%s", cf.OS, cf.Architecture, runtime.GOARCH)
	}
	if !cf.Created.Equal(fixedTime) {
		t.Errorf("created %v, want %v", cf.Created.Time, fixedTime)
	}
	if want := []string{"/usr/local/bin/tool", "--config", "/etc/tool"}; !reflect.DeepEqual(cf.Config.Entrypoint, want) {
		t.Errorf("entrypoint %q, want %q", cf.Config.Entrypoint, want)
	}
	if want := []string{"serve"}; !reflect.DeepEqual(cf.Config.Cmd, want) {
		t.Errorf("cmd %q, want %q", cf.Config.Cmd, want)
	}
	if cf.Config.User != "65532:65532" {
		t.Errorf("user %q", cf.Config.User)
	}
	if want := []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "A=1", "B=two words"}; !reflect.DeepEqual(cf.Config.Env, want) {
		t.Errorf("env %q, want %q", cf.Config.Env, want)
	}
	if len(cf.RootFS.DiffIDs) != 1 {
		t.Errorf("rootfs diff IDs %v, want one", cf.RootFS.DiffIDs)
	}

	type want struct {
		typ     byte
		mode    int64
		content string
		link    string
	}
	wants := map[string]want{
		"etc/":               {typ: tar.TypeDir, mode: 0o755},
		"etc/tool/":          {typ: tar.TypeDir, mode: 0o755},
		"etc/tool/a.yaml":    {typ: tar.TypeReg, mode: 0o644, content: "alpha: 1\n"},
		"etc/tool/current":   {typ: tar.TypeSymlink, mode: 0o777, link: "a.yaml"},
		"etc/tool/sub/":      {typ: tar.TypeDir, mode: 0o755},
		"etc/tool/sub/b.txt": {typ: tar.TypeReg, mode: 0o600, content: "beta"},
		"usr/":               {typ: tar.TypeDir, mode: 0o755},
		"usr/local/":         {typ: tar.TypeDir, mode: 0o755},
		"usr/local/bin/":     {typ: tar.TypeDir, mode: 0o755},
		"usr/local/bin/tool": {typ: tar.TypeReg, mode: 0o755, content: "#!/bin/true\n"},
	}
	// Sorted by path whatever the order of the arguments, so the same
	// files in another order make the same layer.
	var names []string
	for _, h := range headers {
		names = append(names, h.Name)
	}
	if !sort.StringsAreSorted(names) {
		t.Errorf("entries not in path order: %q", names)
	}
	seen := map[string]bool{}
	for _, h := range headers {
		if seen[h.Name] {
			t.Errorf("%s is in the layer twice", h.Name)
		}
		seen[h.Name] = true
		if parent := path.Dir(strings.TrimSuffix(h.Name, "/")); parent != "." && !seen[parent+"/"] {
			t.Errorf("%s comes before its directory %s/", h.Name, parent)
		}
		w, ok := wants[h.Name]
		if !ok {
			t.Errorf("unexpected entry %s", h.Name)
			continue
		}
		if h.Typeflag != w.typ || h.Mode&0o7777 != w.mode || contents[h.Name] != w.content || h.Linkname != w.link {
			t.Errorf("%s: type %c mode %o content %q link %q, want type %c mode %o content %q link %q",
				h.Name, h.Typeflag, h.Mode, contents[h.Name], h.Linkname, w.typ, w.mode, w.content, w.link)
		}
		if h.Uid != 0 || h.Gid != 0 {
			t.Errorf("%s owned by %d:%d, want root", h.Name, h.Uid, h.Gid)
		}
		if !h.ModTime.Equal(fixedTime) {
			t.Errorf("%s has time %v, want %v", h.Name, h.ModTime, fixedTime)
		}
	}
	for n := range wants {
		if !seen[n] {
			t.Errorf("%s is missing from the layer", n)
		}
	}
}

// TestSameFilesSameImage: the image ID follows the files' content only,
// not when they were written, so a rebuild from unchanged inputs gives the
// image Docker and the node image's key already have; changed content
// gives another.
func TestSameFilesSameImage(t *testing.T) {
	program, dir := tree(t)
	const tag = "example.test/tool:v1"
	build := func() v1.Hash {
		t.Helper()
		out := filepath.Join(t.TempDir(), "img.tar")
		if err := run([]string{"-o", out, "-tag", tag, "/bin/tool=" + program, "/etc/tool=" + dir}); err != nil {
			t.Fatal(err)
		}
		img, _, _, _ := load(t, out, tag)
		id, err := img.ConfigName()
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	first := build()
	later := time.Now().Add(time.Hour)
	for _, p := range []string{program, filepath.Join(dir, "a.yaml"), dir} {
		if err := os.Chtimes(p, later, later); err != nil {
			t.Fatal(err)
		}
	}
	if again := build(); again != first {
		t.Errorf("the same files written at another time give image %s, then %s", first, again)
	}
	write(t, filepath.Join(dir, "a.yaml"), "alpha: 2\n", 0o644)
	if changed := build(); changed == first {
		t.Errorf("changed content gives the same image %s", changed)
	}
}

// TestBadArguments: each mistake is refused with an error that names it,
// and no archive is left behind.
func TestBadArguments(t *testing.T) {
	program, dir := tree(t)
	fifoDir := t.TempDir()
	if err := syscall.Mkfifo(filepath.Join(fifoDir, "pipe"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no output", []string{"-tag", "x:v1", "/a=" + program}, "want -o and -tag"},
		{"no tag", []string{"-o", "OUT", "/a=" + program}, "want -o and -tag"},
		{"bad tag", []string{"-o", "OUT", "-tag", "Bad Tag", "/a=" + program}, `-tag "Bad Tag"`},
		{"no equals", []string{"-o", "OUT", "-tag", "x:v1", program}, "want /DEST=SRC"},
		{"relative dest", []string{"-o", "OUT", "-tag", "x:v1", "usr/a=" + program}, "want /DEST=SRC"},
		{"empty source", []string{"-o", "OUT", "-tag", "x:v1", "/a="}, "want /DEST=SRC"},
		{"missing source", []string{"-o", "OUT", "-tag", "x:v1", "/a=" + filepath.Join(dir, "nothing")}, "no such file"},
		{"fifo", []string{"-o", "OUT", "-tag", "x:v1", "/d=" + fifoDir}, "not a file, link or directory"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "img.tar")
			args := append([]string(nil), tc.args...)
			for i, a := range args {
				if a == "OUT" {
					args[i] = out
				}
			}
			err := run(args)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("run(%q): %v, want an error with %q", tc.args, err, tc.want)
			}
			for _, p := range []string{out, out + ".tmp"} {
				if _, err := os.Stat(p); !os.IsNotExist(err) {
					t.Errorf("%s exists after the error", p)
				}
			}
		})
	}
}
