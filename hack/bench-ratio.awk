# Reads `go test -bench` output containing BenchmarkAllocate/X and
# BenchmarkNaiveAllocate/X lines and prints, for every X, both ns/op figures
# and how many times faster the index is than the naive reference.
/^Benchmark(Naive)?Allocate\// {
	name = $1
	sub(/-[0-9]+$/, "", name)          # drop the GOMAXPROCS suffix
	split(name, parts, "/")
	for (i = 1; i <= NF; i++) if ($(i+1) == "ns/op") ns = $i
	if (parts[1] == "BenchmarkAllocate") fast[parts[2]] = ns
	else naive[parts[2]] = ns
}
{ print }
END {
	printf "\n%-20s %14s %16s %10s\n", "case", "index ns/op", "naive ns/op", "speed-up"
	n = 0
	for (k in fast) keys[++n] = k
	# insertion sort for stable output
	for (i = 2; i <= n; i++) { v = keys[i]; j = i - 1; while (j > 0 && keys[j] > v) { keys[j+1] = keys[j]; j-- } keys[j+1] = v }
	for (i = 1; i <= n; i++) {
		k = keys[i]
		if (k in naive) printf "%-20s %14.0f %16.0f %9.0fx\n", k, fast[k], naive[k], naive[k] / fast[k]
		else printf "%-20s %14.0f %16s %10s\n", k, fast[k], "-", "-"
	}
}
