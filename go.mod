module github.com/rivet-hpc/rivet

go 1.26.0

require (
	github.com/Mellanox/rdmamap v1.1.0
	github.com/cilium/ebpf v0.22.0
	github.com/vishvananda/netlink v1.3.1
	golang.org/x/sys v0.49.0
)

require github.com/vishvananda/netns v0.0.5 // indirect
