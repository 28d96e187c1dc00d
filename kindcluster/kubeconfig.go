package kindcluster

import (
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// renderKubeconfig writes a self-contained kubeconfig (CA inlined) for one
// cluster. Cluster, user and context names all derive from the cluster name,
// so kubeconfigs of several clusters can be merged with KUBECONFIG=a:b.
func renderKubeconfig(name, server string, caPEM []byte, token string) ([]byte, error) {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters[name] = &clientcmdapi.Cluster{
		Server:                   server,
		CertificateAuthorityData: caPEM,
	}
	user := name + "-admin"
	cfg.AuthInfos[user] = &clientcmdapi.AuthInfo{Token: token}
	cfg.Contexts[name] = &clientcmdapi.Context{Cluster: name, AuthInfo: user, Namespace: "default"}
	cfg.CurrentContext = name
	return clientcmd.Write(*cfg)
}
