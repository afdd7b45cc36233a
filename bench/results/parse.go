package results

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
)

// Parse reads the tables in r, whose form it recognises from its first
// line: OSU's ("# OSU MPI Latency Test v7.4", or rivet bench's own tests'
// "# Rivet ..."), perftest's (a rule of dashes, then the test's name),
// rivet bench -format json's ('{') or -format csv's ("test,"). name
// names r in errors ("osu.txt:12: ..."), as does a plot's legend.
func Parse(r io.Reader, name string) ([]Table, error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return nil, fmt.Errorf("results: reading %s: %w", name, err)
	}
	first, line := firstLine(data)
	var tables []Table
	switch {
	case first == "":
		return nil, fmt.Errorf("%w: %s is empty", ErrFormat, name)
	case strings.HasPrefix(first, "{"):
		tables, err = parseJSON(data, name)
	case strings.HasPrefix(first, "test,"):
		tables, err = parseCSV(data, name)
	case strings.HasPrefix(first, "# "):
		tables, err = parseOSU(data, name)
	case strings.HasPrefix(first, "-----"):
		tables, err = parsePerftest(data, name)
	default:
		return nil, fmt.Errorf("%w: %s:%d: %q is not the start of OSU, perftest, JSON or CSV results", ErrFormat, name, line, clip(first))
	}
	if err != nil {
		return nil, err
	}
	for _, t := range tables {
		if len(t.Rows) > 0 {
			return tables, nil
		}
	}
	return nil, fmt.Errorf("%w: %s has no rows of results", ErrFormat, name)
}

// firstLine returns the first line that is not blank, trimmed, and its
// number.
func firstLine(data []byte) (string, int) {
	for i, l := range strings.Split(string(data), "\n") {
		if s := strings.TrimSpace(l); s != "" {
			return s, i + 1
		}
	}
	return "", 0
}

func clip(s string) string {
	if len(s) > 60 {
		return s[:57] + "..."
	}
	return s
}

// lines calls f with every line of data and its number; f's error stops
// the scan and is returned, prefixed with where it happened.
func lines(data []byte, name string, f func(n int, l string) error) error {
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, 1<<20)
	for n := 1; sc.Scan(); n++ {
		if err := f(n, strings.TrimRight(sc.Text(), " \t\r")); err != nil {
			return fmt.Errorf("%w: %s:%d: %v", ErrFormat, name, n, err)
		}
	}
	return sc.Err()
}

var cells = regexp.MustCompile(`\S+(?: \S+)*`) // separated by two spaces or more (or a tab)

// parseOSU reads OSU-style output: each table is a block of '#' lines —
// the title, notes, and the column header (the '#' line of two cells or
// more) — and then its rows.
func parseOSU(data []byte, name string) ([]Table, error) {
	var tables []Table
	var t *Table
	err := lines(data, name, func(n int, l string) error {
		s := strings.TrimSpace(l)
		switch {
		case s == "":
			return nil
		case strings.HasPrefix(s, "#"):
			body := strings.TrimSpace(strings.TrimPrefix(s, "#"))
			if t == nil || len(t.Rows) > 0 {
				tables = append(tables, Table{Title: body})
				t = &tables[len(tables)-1]
				return nil
			}
			hdr := cells.FindAllString(strings.ReplaceAll(body, "\t", "  "), -1)
			if len(hdr) < 2 {
				t.Notes = append(t.Notes, body)
				return nil
			}
			t.Columns = t.Columns[:0]
			for i, h := range hdr {
				c := splitUnit(h)
				if i == 0 && c.Name == "Size" && c.Unit == "" {
					c.Unit = "bytes"
				}
				t.Columns = append(t.Columns, c)
			}
			return nil
		}
		if m := initLine.FindStringSubmatch(s); m != nil && t != nil && len(t.Columns) == 0 {
			// osu_init's one line: a row keyed by the number of
			// processes (a plot of several runs draws the time
			// against it).
			t.Columns = []Column{{Name: "Processes"}, {Name: "Min", Unit: "ms"}, {Name: "Max", Unit: "ms"}, {Name: "Avg", Unit: "ms"}}
			row, err := parseRow(m[1:], len(t.Columns))
			if err == nil {
				t.Rows = append(t.Rows, row)
			}
			return err
		}
		if t == nil || len(t.Columns) == 0 {
			return fmt.Errorf("a row before any column header: %q", clip(s))
		}
		row, err := parseRow(strings.Fields(s), len(t.Columns))
		if err != nil {
			return err
		}
		t.Rows = append(t.Rows, row)
		return nil
	})
	return tables, err
}

// initLine is osu_init's result line (OSU 7.4's format).
var initLine = regexp.MustCompile(`^nprocs: (\d+), min: (-?\d+) ms, max: (-?\d+) ms, avg: (-?\d+) ms$`)

// parseRow reads a row of ncol columns: the values are the last
// ncol-1 fields, the key the fields before them.
func parseRow(f []string, ncol int) (Row, error) {
	if len(f) < ncol {
		return Row{}, fmt.Errorf("%d fields, want %d (one per column)", len(f), ncol)
	}
	k := len(f) - (ncol - 1)
	row := Row{Key: strings.Join(f[:k], " "), Values: make([]float64, 0, ncol-1)}
	if k > 1 {
		if _, err := strconv.ParseFloat(f[0], 64); err == nil {
			return Row{}, fmt.Errorf("%d fields, want %d (one per column)", len(f), ncol)
		}
	}
	for _, s := range f[k:] {
		v, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return Row{}, fmt.Errorf("%q is not a number", s)
		}
		row.Values = append(row.Values, v)
	}
	return row, nil
}

// perftest's header cells: "#bytes", or a name with its unit in
// brackets ("t_avg[usec]", "99% percentile[usec]", "BW peak[MB/sec]").
var perftestCells = regexp.MustCompile(`#\S+|[^\s#][^\[\]]*?\[[^\]]*\]|\S+`)

// parsePerftest reads perftest's output (and rivet perf's): the test's
// name after the first rule, "key : value" notes, the column header
// (" #bytes ..."), and its rows. Histogram lines ("1, 2.34") are left
// out.
func parsePerftest(data []byte, name string) ([]Table, error) {
	var tables []Table
	var t *Table
	afterRule := false
	err := lines(data, name, func(n int, l string) error {
		s := strings.TrimSpace(l)
		rule := strings.HasPrefix(s, "-----")
		defer func() { afterRule = rule || afterRule && s == "" }()
		switch {
		case s == "" || rule:
			return nil
		case strings.HasPrefix(s, "#bytes"):
			if t == nil {
				return fmt.Errorf("a column header before the test's name")
			}
			t.Columns = t.Columns[:0]
			for i, h := range perftestCells.FindAllString(s, -1) {
				c := splitUnit(h)
				if i == 0 {
					c = Column{Name: "Size", Unit: "bytes"}
				}
				t.Columns = append(t.Columns, c)
			}
			return nil
		case strings.HasPrefix(s, "#,") || strings.Contains(s, ", "):
			return nil // a histogram's samples
		}
		numeric := isNumber(strings.Fields(s)[0])
		switch {
		case t == nil && afterRule, t != nil && afterRule && len(t.Rows) > 0 && !numeric:
			tables = append(tables, Table{Title: s})
			t = &tables[len(tables)-1]
		case t == nil:
			return fmt.Errorf("%q before the test's name", clip(s))
		case numeric && len(t.Columns) > 0:
			row, err := parseRow(strings.Fields(s), len(t.Columns))
			if err != nil {
				return err
			}
			t.Rows = append(t.Rows, row)
		default:
			t.Notes = append(t.Notes, s)
		}
		return nil
	})
	return tables, err
}

func isNumber(s string) bool {
	_, err := strconv.ParseFloat(s, 64)
	return err == nil
}

// parseJSON reads WriteJSON's form.
func parseJSON(data []byte, name string) ([]Table, error) {
	var doc document
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&doc); err != nil {
		line := 1 + bytes.Count(data[:min(int(dec.InputOffset()), len(data))], []byte("\n"))
		var se *json.SyntaxError
		if errors.As(err, &se) {
			line = 1 + bytes.Count(data[:min(int(se.Offset), len(data))], []byte("\n"))
		}
		return nil, fmt.Errorf("%w: %s:%d: %v", ErrFormat, name, line, err)
	}
	if doc.Format != jsonFormat {
		return nil, fmt.Errorf("%w: %s:1: format %q, want %q", ErrFormat, name, doc.Format, jsonFormat)
	}
	for i, t := range doc.Tables {
		for j, r := range t.Rows {
			if len(r.Values) != len(t.Columns)-1 {
				return nil, fmt.Errorf("%w: %s: table %d, row %d: %d values for %d columns", ErrFormat, name, i+1, j+1, len(r.Values), len(t.Columns))
			}
		}
	}
	return doc.Tables, nil
}
