//go:build linux

package files

import (
	"fmt"
	"strconv"

	"github.com/rivet-hpc/rivet/fabric"
)

// Buffering says whether collective data access aggregates (two-phase
// I/O, ROMIO's romio_cb_read and romio_cb_write).
type Buffering int

const (
	// BufferingAuto aggregates when the processes' accesses interleave
	// in pieces smaller than Hints.DirectMin: many small writes become
	// a few large ones, and processes stop writing one file's
	// neighbouring pages at once. Accesses in pieces large enough go
	// straight between the file and each process's buffer, which moves
	// every byte once.
	BufferingAuto Buffering = iota
	// BufferingOn always aggregates.
	BufferingOn
	// BufferingOff never does: each process accesses its own pieces.
	BufferingOff
)

func (b Buffering) String() string {
	switch b {
	case BufferingAuto:
		return "automatic"
	case BufferingOn:
		return "enable"
	case BufferingOff:
		return "disable"
	}
	return fmt.Sprintf("Buffering(%d)", int(b))
}

// Hints tune collective data access (MPI's file info hints). The zero
// Hints are the defaults.
type Hints struct {
	// Buffering: whether collective access aggregates (cb_read/cb_write).
	Buffering Buffering
	// Aggregators is how many processes aggregate (cb_nodes); 0: every
	// process, up to 16. They are spread evenly over the ranks.
	Aggregators int
	// BufferSize is each aggregator's buffer, the most it writes or
	// reads in one call (cb_buffer_size); 0: 4 MiB — small enough that
	// a window's data is still in the CPU's cache when it is written
	// (measured faster here than ROMIO's 16 MiB). Aggregators hold two,
	// to overlap the exchange with the file system.
	BufferSize int
	// DirectMin is BufferingAuto's threshold: accesses whose pieces
	// average at least this many bytes are not aggregated; 0: 1 KiB
	// (measured on tmpfs and ext4, where a piece of a few hundred bytes
	// costs a system call's time; docs/io.md).
	DirectMin int
}

const (
	defaultBufferSize  = 4 << 20
	defaultDirectMin   = 1 << 10
	defaultAggregators = 16
)

func (h Hints) check() error {
	if h.Buffering < BufferingAuto || h.Buffering > BufferingOff || h.Aggregators < 0 || h.BufferSize < 0 || h.DirectMin < 0 {
		return fmt.Errorf("%w: files: hints %+v", fabric.ErrInvalid, h)
	}
	return nil
}

func (h Hints) withDefaults(n int) Hints {
	if h.Aggregators == 0 || h.Aggregators > n {
		h.Aggregators = min(n, max(h.Aggregators, defaultAggregators))
	}
	if h.BufferSize == 0 {
		h.BufferSize = defaultBufferSize
	}
	h.BufferSize = (h.BufferSize + 4095) &^ 4095
	return h
}

// directMin is DirectMin, or its default.
func (h Hints) directMin() int64 {
	if h.DirectMin > 0 {
		return int64(h.DirectMin)
	}
	return defaultDirectMin
}

// ParseHints reads MPI's reserved hint names (MPI 4.1 §14.2.8) and
// ROMIO's: cb_nodes, cb_buffer_size, romio_cb_write and romio_cb_read
// (enable, disable, automatic; the two must agree), and Rivet's
// rivet_direct_min. Other names are ignored, as MPI ignores hints it
// does not know; a known name with a bad value is an error.
func ParseHints(info map[string]string) (Hints, error) {
	var h Hints
	num := func(k string, dst *int) error {
		v, ok := info[k]
		if !ok {
			return nil
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return fmt.Errorf("%w: files: hint %s=%q", fabric.ErrInvalid, k, v)
		}
		*dst = n
		return nil
	}
	for k, dst := range map[string]*int{"cb_nodes": &h.Aggregators, "cb_buffer_size": &h.BufferSize, "rivet_direct_min": &h.DirectMin} {
		if err := num(k, dst); err != nil {
			return h, err
		}
	}
	seen := ""
	for _, k := range []string{"romio_cb_write", "romio_cb_read"} {
		v, ok := info[k]
		if !ok {
			continue
		}
		var b Buffering
		switch v {
		case "automatic":
			b = BufferingAuto
		case "enable":
			b = BufferingOn
		case "disable":
			b = BufferingOff
		default:
			return h, fmt.Errorf("%w: files: hint %s=%q (enable, disable or automatic)", fabric.ErrInvalid, k, v)
		}
		if seen != "" && b != h.Buffering {
			return h, fmt.Errorf("%w: files: romio_cb_write and romio_cb_read differ; Rivet takes one setting for both", fabric.ErrInvalid)
		}
		h.Buffering, seen = b, k
	}
	return h, nil
}

// Info is h as MPI's hint names, with the defaults filled in for a file
// over n processes (what MPI_File_get_info shows).
func (h Hints) Info(n int) map[string]string {
	h = h.withDefaults(n)
	m := map[string]string{
		"cb_nodes":       strconv.Itoa(h.Aggregators),
		"cb_buffer_size": strconv.Itoa(h.BufferSize),
		"romio_cb_write": h.Buffering.String(),
		"romio_cb_read":  h.Buffering.String(),
	}
	if h.DirectMin > 0 {
		m["rivet_direct_min"] = strconv.Itoa(h.DirectMin)
	}
	return m
}
