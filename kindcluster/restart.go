package kindcluster

import (
	"context"
	"errors"
	"fmt"
)

// StopAPIServer stops the cluster's kube-apiserver and leaves etcd (and so
// every object) in place, to test how clients live through an API server
// outage. StartAPIServer brings it back.
//
// Neither may run concurrently with Stop, Pids or each other: they replace
// the process the Cluster holds.
func (c *Cluster) StopAPIServer() error {
	if c.apiserver == nil {
		return errors.New("kindcluster: no API server to stop")
	}
	if err := c.apiserver.Stop(c.opts.StopGrace); err != nil {
		return fmt.Errorf("stop kube-apiserver of %q: %w", c.opts.Name, err)
	}
	c.logf("cluster %q: kube-apiserver stopped", c.opts.Name)
	return nil
}

// StartAPIServer starts the kube-apiserver again with the same command line
// (same port, certificates and tokens, so existing clients and kubeconfigs
// keep working) and waits until it is ready. It refuses if the API server
// is still running, unless it is the one an earlier StartAPIServer started
// and gave up waiting for: then it waits for that one again (a loaded
// machine can take longer than one wait to make it ready, and starting
// another on the same port would fail).
func (c *Cluster) StartAPIServer(ctx context.Context) error {
	if c.apiserver != nil {
		select {
		case <-c.apiserver.Done():
		default:
			if !c.apiserverUnready {
				return errors.New("kindcluster: the API server is still running (StopAPIServer first)")
			}
			return c.awaitStarted(ctx)
		}
	}
	p, err := c.opts.Runner.Start(c.apiserverCommand(c.opts.APIServerPort))
	if err != nil {
		return err
	}
	c.apiserver = p
	return c.awaitStarted(ctx)
}

// awaitStarted waits until the kube-apiserver just started is ready.
func (c *Cluster) awaitStarted(ctx context.Context) error {
	c.apiserverUnready = true
	if err := c.waitAPIServer(ctx); err != nil {
		return err
	}
	c.apiserverUnready = false
	// `qm cluster down` finds processes through the state file.
	return c.writeState()
}

// RestartAPIServer stops the kube-apiserver and starts it again on the same
// port; see StopAPIServer.
func (c *Cluster) RestartAPIServer(ctx context.Context) error {
	if err := c.StopAPIServer(); err != nil {
		return err
	}
	return c.StartAPIServer(ctx)
}
