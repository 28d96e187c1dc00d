// Command layerimage writes a container image made of one layer of local
// files, as an image archive that `docker load` and `ctr images import`
// read, with no base image, registry or daemon: the offline kind node
// image (hack/kind/node-image.sh) preloads the control plane's images made
// this way, and the qm image is one too.
//
//	layerimage -o kube-apiserver.tar -tag registry.k8s.io/kube-apiserver:v1.36.3 \
//	    -entrypoint /usr/local/bin/kube-apiserver /usr/local/bin/kube-apiserver=bin/kube-apiserver
//
// Each argument is DEST=SRC: the file, symbolic link or directory tree SRC
// at DEST in the image. Every entry gets the same fixed time, so the same
// files give the same image ID.
package main

import (
	"archive/tar"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(s string) error { *l = append(*l, s); return nil }

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "layerimage:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fl := flag.NewFlagSet("layerimage", flag.ContinueOnError)
	out := fl.String("o", "", "the image archive to write")
	tag := fl.String("tag", "", "the image's name and tag, e.g. registry.k8s.io/pause:3.10")
	entrypoint := fl.String("entrypoint", "", "the entrypoint, words separated by commas")
	cmd := fl.String("cmd", "", "the default arguments, words separated by commas")
	user := fl.String("user", "", "the user (uid[:gid]) the image runs as")
	var env listFlag
	fl.Var(&env, "env", "an environment variable NAME=VALUE (repeatable)")
	if err := fl.Parse(args); err != nil {
		return err
	}
	if *out == "" || *tag == "" {
		return errors.New("want -o and -tag")
	}
	ref, err := name.NewTag(*tag, name.WeakValidation)
	if err != nil {
		return fmt.Errorf("-tag %q: %w", *tag, err)
	}
	var entries []entry
	for _, a := range fl.Args() {
		dest, src, ok := strings.Cut(a, "=")
		if !ok || !path.IsAbs(dest) || src == "" {
			return fmt.Errorf("argument %q: want /DEST=SRC", a)
		}
		e, err := collect(path.Clean(dest), src)
		if err != nil {
			return err
		}
		entries = append(entries, e...)
	}
	layerTar, err := writeTar(entries)
	if err != nil {
		return err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	})
	if err != nil {
		return err
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		return err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", runtime.GOARCH
	cf.Created = v1.Time{Time: fixedTime}
	cf.Config.Entrypoint = words(*entrypoint)
	cf.Config.Cmd = words(*cmd)
	cf.Config.User = *user
	cf.Config.Env = append([]string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}, env...)
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		return err
	}
	tmp := *out + ".tmp"
	if err := tarball.WriteToFile(tmp, ref, img); err != nil {
		return err
	}
	return os.Rename(tmp, *out)
}

func words(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}

// fixedTime is every entry's and the image's creation time: the same
// files make the same image.
var fixedTime = time.Unix(0, 0).UTC()

type entry struct {
	dest string      // absolute, clean
	src  string      // on this host
	info fs.FileInfo // Lstat of src
}

// collect lists src at dest: the file or link itself, or the tree under a
// directory, parents first.
func collect(dest, src string) ([]entry, error) {
	info, err := os.Lstat(src)
	if err != nil {
		return nil, err
	}
	if !info.IsDir() {
		return []entry{{dest, src, info}}, nil
	}
	var out []entry
	err = filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		out = append(out, entry{path.Join(dest, filepath.ToSlash(rel)), p, info})
		return nil
	})
	return out, err
}

// writeTar writes the layer: every parent directory once, then the
// entries sorted by path.
func writeTar(entries []entry) ([]byte, error) {
	sort.SliceStable(entries, func(i, j int) bool { return entries[i].dest < entries[j].dest })
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	dirs := map[string]bool{"/": true}
	var mkdirs func(string) error
	mkdirs = func(dir string) error {
		if dirs[dir] {
			return nil
		}
		if err := mkdirs(path.Dir(dir)); err != nil {
			return err
		}
		dirs[dir] = true
		return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: strings.TrimPrefix(dir, "/") + "/", Mode: 0o755, ModTime: fixedTime, Format: tar.FormatPAX})
	}
	for _, e := range entries {
		if err := mkdirs(path.Dir(e.dest)); err != nil {
			return nil, err
		}
		name := strings.TrimPrefix(e.dest, "/")
		h := &tar.Header{Name: name, Mode: int64(e.info.Mode().Perm()), ModTime: fixedTime, Format: tar.FormatPAX}
		switch m := e.info.Mode(); {
		case m.IsDir():
			if dirs[e.dest] {
				continue
			}
			dirs[e.dest] = true
			h.Typeflag, h.Name = tar.TypeDir, name+"/"
			if err := tw.WriteHeader(h); err != nil {
				return nil, err
			}
		case m&fs.ModeSymlink != 0:
			target, err := os.Readlink(e.src)
			if err != nil {
				return nil, err
			}
			h.Typeflag, h.Linkname = tar.TypeSymlink, target
			if err := tw.WriteHeader(h); err != nil {
				return nil, err
			}
		case m.IsRegular():
			data, err := os.ReadFile(e.src)
			if err != nil {
				return nil, err
			}
			h.Typeflag, h.Size = tar.TypeReg, int64(len(data))
			if err := tw.WriteHeader(h); err != nil {
				return nil, err
			}
			if _, err := tw.Write(data); err != nil {
				return nil, err
			}
		default:
			return nil, fmt.Errorf("%s: not a file, link or directory", e.src)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
