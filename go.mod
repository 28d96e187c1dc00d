module github.com/quartermaster-dev/quartermaster

go 1.26
