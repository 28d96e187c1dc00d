package soakrun

import (
	"sort"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

func sortStrings(s []string) { sort.Strings(s) }

func sortFleets(items []unstructured.Unstructured) {
	sort.Slice(items, func(i, j int) bool { return items[i].GetName() < items[j].GetName() })
}
