module github.com/rivet-hpc/rivet/lab

go 1.26.0

require (
	github.com/rivet-hpc/rivet v0.0.0
	golang.org/x/sys v0.49.0
)

replace github.com/rivet-hpc/rivet => ../
