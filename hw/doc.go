//go:build linux

// Package hw discovers RDMA hardware and watches it: devices and their
// uverbs character devices, ports, GID tables, soft-RoCE (rxe) links, and a
// stream of link and port events.
//
// It reads sysfs (/sys/class/infiniband, /sys/class/infiniband_verbs), asks
// the uverbs device for what sysfs does not show (port MTUs, as ibv_devinfo
// does) and for what sysfs shows slowly (the GID table, one ioctl instead of
// a file per entry, for rxe), and talks netlink for rxe links and link events. Nothing here needs
// cgo or libibverbs.
package hw
