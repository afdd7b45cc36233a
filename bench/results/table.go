// Package results reads and writes the tables benchmarks print: OSU
// Micro-Benchmarks 7.4 output (rivet bench's and OSU's own), perftest's
// (ib_write_lat and friends, and rivet perf's), and the JSON and CSV forms
// rivet bench -format writes. Every form reads into the same Table, so a
// plot or a dashboard can take any of them.
package results

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// ErrFormat is wrapped by every error about input that is not a
// benchmark table; the error names the input and the line.
var ErrFormat = errors.New("results: not a benchmark table")

// Table is one benchmark's results: a title, the header lines that say
// how it ran, and rows of numbers under named columns.
type Table struct {
	// Title names the benchmark, as its output does ("OSU MPI Latency
	// Test v7.4", "RDMA_Write Latency Test").
	Title string `json:"title"`
	// Notes are the other header lines ("Datatype: MPI_CHAR.").
	Notes []string `json:"notes,omitempty"`
	// Columns name the columns; the first is the row's key (a size in
	// bytes in the OSU and perftest tables).
	Columns []Column `json:"columns"`
	Rows    []Row    `json:"rows"`
}

// Column is a column's name and unit, as its header gives them:
// "Avg Latency(us)" is {Name: "Avg Latency", Unit: "us"}.
type Column struct {
	Name string `json:"name"`
	Unit string `json:"unit,omitempty"`
}

// String is the column as a header prints it.
func (c Column) String() string {
	if c.Unit == "" || c.Unit == c.Name {
		return c.Name
	}
	return c.Name + " (" + c.Unit + ")"
}

// Row is one line of a table: its key as printed (a size, or a name such
// as "barrier"), and the numbers in the other columns.
type Row struct {
	Key    string
	Values []float64
}

// Size returns the row's key as a number of bytes, if it is one.
func (r Row) Size() (float64, bool) {
	v, err := strconv.ParseFloat(r.Key, 64)
	return v, err == nil
}

// Sized reports whether every row's key is a number (a size).
func (t *Table) Sized() bool {
	for _, r := range t.Rows {
		if _, ok := r.Size(); !ok {
			return false
		}
	}
	return len(t.Rows) > 0
}

// Column returns the index among the value columns (0 for the column
// after the key) of the column whose name or header contains name,
// ignoring case. With name empty it is the table's headline measure:
// perftest's t_typical or BW average, else the first value column that
// is not a count of iterations.
func (t *Table) Column(name string) (int, error) {
	if len(t.Columns) < 2 {
		return 0, fmt.Errorf("%w: %q has no value column", ErrFormat, t.Title)
	}
	if name == "" {
		first := -1
		for i, c := range t.Columns[1:] {
			switch {
			case c.Name == "t_typical" || c.Name == "BW average":
				return i, nil
			case first < 0 && !strings.HasPrefix(c.Name, "#") && c.Name != "Iterations":
				first = i
			}
		}
		return max(first, 0), nil
	}
	for i, c := range t.Columns[1:] {
		if strings.Contains(strings.ToLower(c.String()), strings.ToLower(name)) {
			return i, nil
		}
	}
	var have []string
	for _, c := range t.Columns[1:] {
		have = append(have, fmt.Sprintf("%q", c.String()))
	}
	return 0, fmt.Errorf("results: %q has no column %q (it has %s)", t.Title, name, strings.Join(have, ", "))
}

// splitUnit reads a header cell: "Latency (us)", "Avg Latency(us)",
// "t_avg[usec]", "BW average[MB/sec]", "MB/s".
func splitUnit(h string) Column {
	h = strings.TrimSpace(h)
	for _, br := range []string{"()", "[]"} {
		if strings.HasSuffix(h, br[1:]) {
			if i := strings.LastIndexByte(h, br[0]); i > 0 {
				return Column{Name: strings.TrimSpace(h[:i]), Unit: normUnit(h[i+1 : len(h)-1])}
			}
		}
	}
	if u := normUnit(h); u != h || strings.Contains(h, "/") {
		return Column{Name: h, Unit: u}
	}
	return Column{Name: h}
}

// normUnit spells the units of the formats one way.
func normUnit(u string) string {
	switch u {
	case "usec":
		return "us"
	case "MB/sec":
		return "MB/s"
	}
	return u
}
