module github.com/rivet-hpc/rivet/lab

go 1.26.0

require (
	github.com/rivet-hpc/rivet v0.0.0
	golang.org/x/sys v0.49.0
)

require (
	github.com/Mellanox/rdmamap v1.1.0 // indirect
	github.com/vishvananda/netlink v1.3.1 // indirect
	github.com/vishvananda/netns v0.0.5 // indirect
)

replace github.com/rivet-hpc/rivet => ../
