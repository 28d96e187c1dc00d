package kind

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"syscall"
	"time"

	"sigs.k8s.io/kind/pkg/apis/config/v1alpha4"
	kindexec "sigs.k8s.io/kind/pkg/exec"
)

// Docker publishes a node's ports by listening on the host. That fails,
// and `docker run` exits 125 ("bind: address already in use"), while any
// socket holds the address: a program listening there, or a connection
// that took the port as its own local port, which keeps it through TCP's
// TIME_WAIT after it closes. On Linux every outgoing connection's local
// port comes from net.ipv4.ip_local_port_range (32768 to 60999 unless
// configured), so the rig's default ports lie below it; Create still
// waits for the ports of a config to be free before handing it to kind,
// and says which one it waits for.

// DefaultPortWait is how long Create waits for a host port of the config
// to be free: longer than Linux's TIME_WAIT, so a connection closed just
// before the start cannot fail the run.
const DefaultPortWait = 90 * time.Second

// hostPorts are the TCP addresses on this host that Docker binds for the
// config: every node's published ports and the API server's port.
func hostPorts(config *v1alpha4.Cluster) []string {
	var addrs []string
	add := func(host string, port int32) {
		if port <= 0 {
			return // Docker picks a free one
		}
		if host == "" {
			host = "0.0.0.0"
		}
		addrs = append(addrs, net.JoinHostPort(host, strconv.Itoa(int(port))))
	}
	for _, n := range config.Nodes {
		for _, m := range n.ExtraPortMappings {
			if m.Protocol == "" || m.Protocol == v1alpha4.PortMappingProtocolTCP {
				add(m.ListenAddress, m.HostPort)
			}
		}
	}
	apiHost := config.Networking.APIServerAddress
	if apiHost == "" {
		apiHost = "127.0.0.1" // kind's default
	}
	add(apiHost, config.Networking.APIServerPort)
	return addrs
}

// errPortInUse is what portFree returns for an address some socket holds.
var errPortInUse = errors.New("in use")

// portFree says whether a listener could bind addr now, as Docker's
// port proxy would: errPortInUse if a socket holds it, another error if
// the address cannot be bound at all.
func portFree(addr string) error {
	l, err := net.Listen("tcp", addr)
	if err == nil {
		return l.Close()
	}
	if errors.Is(err, syscall.EADDRINUSE) {
		return errPortInUse
	}
	return err
}

// waitForPorts returns once every address is free, or fails naming the
// one still taken after wait. It logs what it waits for, once per address.
func waitForPorts(addrs []string, wait time.Duration, logf func(string, ...any)) error {
	deadline := time.Now().Add(wait)
	said := map[string]bool{}
	for {
		busy := ""
		for _, a := range addrs {
			err := portFree(a)
			if errors.Is(err, errPortInUse) {
				busy = a
				break
			}
			if err != nil {
				return fmt.Errorf("host port %s cannot be published: %w", a, err)
			}
		}
		if busy == "" {
			return nil
		}
		_, port, _ := net.SplitHostPort(busy)
		if !time.Now().Before(deadline) {
			return fmt.Errorf("host port %s is still in use after %s, so Docker cannot publish it (ss -tanp 'sport = :%s' shows the socket; another rig up, or a port in this host's ip_local_port_range: choose other ports)",
				busy, wait, port)
		}
		if !said[busy] {
			said[busy] = true
			logf("host port %s is in use (a program listens there, or a connection holds it as its local port, for up to a minute after it closes): waiting up to %s", busy, time.Until(deadline).Round(time.Second))
		}
		time.Sleep(time.Second)
	}
}

// withOutput adds to an error from kind what the failed command printed
// (kind's errors name the command and its exit status only): for a
// failed `docker run`, Docker's reason.
func withOutput(err error) error {
	re := kindexec.RunErrorForError(err)
	if re == nil {
		return err
	}
	out := strings.TrimSpace(string(re.Output))
	if out == "" {
		return err
	}
	return fmt.Errorf("%w: %s", err, out)
}

// portTaken says whether a failed create failed on a host port.
func portTaken(err error) bool {
	return err != nil && strings.Contains(err.Error(), "address already in use")
}
