package kindcluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/rest"

	"github.com/quartermaster-dev/quartermaster/deploy/crds"
)

// CRDs decodes Quartermaster's CustomResourceDefinitions from deploy/crds,
// in file order.
func CRDs() ([]*apiextensionsv1.CustomResourceDefinition, error) {
	var out []*apiextensionsv1.CustomResourceDefinition
	for _, f := range crds.All() {
		dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(f.YAML), 4096)
		for {
			crd := &apiextensionsv1.CustomResourceDefinition{}
			err := dec.Decode(crd)
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				return nil, fmt.Errorf("%s: %w", f.Name, err)
			}
			if crd.Name == "" { // an empty document between separators
				continue
			}
			out = append(out, crd)
		}
	}
	return out, nil
}

// InstallCRDs creates (or updates) Quartermaster's CRDs in the cluster cfg
// points at, and waits until each is Established, i.e. served, so callers
// can create objects right away.
func InstallCRDs(ctx context.Context, cfg *rest.Config, timeout time.Duration) error {
	client, err := apiextensionsclient.NewForConfig(cfg)
	if err != nil {
		return err
	}
	defs, err := CRDs()
	if err != nil {
		return err
	}
	api := client.ApiextensionsV1().CustomResourceDefinitions()
	for _, crd := range defs {
		_, err := api.Create(ctx, crd, metav1.CreateOptions{FieldValidation: "Strict"})
		if apierrors.IsAlreadyExists(err) {
			err = updateCRD(ctx, client, crd)
		}
		if err != nil {
			return fmt.Errorf("install CRD %s: %w", crd.Name, err)
		}
	}
	for _, crd := range defs {
		if err := waitEstablished(ctx, client, crd.Name, timeout); err != nil {
			return err
		}
	}
	return nil
}

func updateCRD(ctx context.Context, client apiextensionsclient.Interface, crd *apiextensionsv1.CustomResourceDefinition) error {
	api := client.ApiextensionsV1().CustomResourceDefinitions()
	cur, err := api.Get(ctx, crd.Name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	next := crd.DeepCopy()
	next.ResourceVersion = cur.ResourceVersion
	_, err = api.Update(ctx, next, metav1.UpdateOptions{FieldValidation: "Strict"})
	return err
}

func waitEstablished(ctx context.Context, client apiextensionsclient.Interface, name string, timeout time.Duration) error {
	var last []apiextensionsv1.CustomResourceDefinitionCondition
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		crd, err := client.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil // transient while the server settles; the timeout bounds it
		}
		last = crd.Status.Conditions
		for _, c := range crd.Status.Conditions {
			if c.Type == apiextensionsv1.NamesAccepted && c.Status == apiextensionsv1.ConditionFalse {
				return false, fmt.Errorf("CRD %s: names not accepted: %s", name, c.Message)
			}
			if c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("CRD %s not Established (conditions %+v): %w", name, last, err)
	}
	return nil
}

func (c *Cluster) installCRDs(ctx context.Context) error {
	if c.dryRun != nil {
		defs, err := CRDs()
		if err != nil {
			return err
		}
		for _, d := range defs {
			c.dryRun.Notef("install CRD %s (%s/%s %s) and wait until Established",
				d.Name, d.Spec.Group, d.Spec.Versions[0].Name, d.Spec.Names.Kind)
		}
		return nil
	}
	start := time.Now()
	if err := InstallCRDs(ctx, c.RESTConfig(), c.opts.StartTimeout); err != nil {
		return err
	}
	c.logf("CRDs established after %s", time.Since(start).Round(time.Millisecond))
	return nil
}
