// Package docs holds Quartermaster's design documents (Markdown). It has no
// code; its test keeps the documents and the code that cites them in step:
// a comment may only point at a document the repository carries.
package docs
