// Package helm holds the tests of Quartermaster's Helm chart
// (quartermaster/): rendering with the Helm SDK against golden files, helm
// lint's rules, the values schema, and the rendered objects applied to a
// real API server. It is a module of its own so the Helm SDK's many
// dependencies stay out of the main module's go.mod.
package helm
