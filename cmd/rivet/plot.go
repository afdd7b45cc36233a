//go:build linux

package main

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/rivet-hpc/rivet/bench/chart"
	"github.com/rivet-hpc/rivet/bench/results"
)

const plotUsage = `usage: rivet plot [flags] [FILE...]

Draws the results in each FILE (or standard input, or "-") as curves
against the message size: one series per file, or per table when a file
holds several (osu_fop_latency -T all). A file may be rivet bench's or
OSU 7.4's output, perftest's (ib_write_lat, rivet perf), or rivet bench
-format json or csv; the form is recognised from its first line. With two
series, a panel below shows the first over the second.

  rivet bench osu_latency > rivet.txt
  rivet plot -o latency.svg -label Rivet,"Open MPI" rivet.txt ompi.txt

Flags:
`

func plotCmd(args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("rivet plot", flag.ContinueOnError)
	fs.Usage = func() { fmt.Fprint(stderr, plotUsage); fs.PrintDefaults() }
	out := fs.String("o", "", "write to `FILE` (.svg or .png; default: SVG on standard output)")
	format := fs.String("format", "", "`svg` or png (default: from -o's extension)")
	labels := fs.String("label", "", "the series' names, `A,B,...` in the files' order (default: the files' names)")
	column := fs.String("y", "", "the `column` to draw, by (part of) its name, e.g. t_typical (default: the first after the size)")
	title := fs.String("title", "", "the chart's title (default: the first table's)")
	linear := fs.Bool("linear", false, "a linear axis for the measure (default: logarithmic)")
	if err := parseFlags(fs, args, stderr); err != nil {
		return err
	}
	files := fs.Args()
	if len(files) == 0 {
		files = []string{"-"}
	}
	var names []string
	if *labels != "" {
		names = strings.Split(*labels, ",")
		if len(names) != len(files) {
			fmt.Fprintf(stderr, "rivet plot: -label names %d series, for %d files\n", len(names), len(files))
			return errUsage
		}
	}
	var series []chart.Series
	for i, file := range files {
		tables, name, err := readResults(file, stdin)
		if err != nil {
			return err
		}
		label := strings.TrimSuffix(filepath.Base(name), filepath.Ext(name))
		if names != nil {
			label = names[i]
		}
		for k, t := range tables {
			col, err := t.Column(*column)
			if err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
			s := chart.Series{Label: label, Table: t, Column: col}
			if len(tables) > 1 {
				s.Label = fmt.Sprintf("%s, %s", label, tell(tables, k))
			}
			series = append(series, s)
		}
	}
	if *format == "" {
		*format = "svg"
		if strings.EqualFold(filepath.Ext(*out), ".png") {
			*format = "png"
		}
	}
	var buf bytes.Buffer
	if err := chart.Draw(&buf, series, chart.Options{Title: *title, Linear: *linear, Format: *format}); err != nil {
		return err
	}
	if *out == "" {
		_, err := stdout.Write(buf.Bytes())
		return err
	}
	return os.WriteFile(*out, buf.Bytes(), 0o644)
}

// readResults parses file ("-": stdin) and returns its tables and the
// name errors and legends use.
func readResults(file string, stdin io.Reader) ([]results.Table, string, error) {
	if file == "-" {
		t, err := results.Parse(stdin, "stdin")
		return t, "stdin", err
	}
	f, err := os.Open(file)
	if err != nil {
		return nil, file, err
	}
	defer f.Close()
	t, err := results.Parse(f, file)
	return t, file, err
}

// tell names table k among tables from one file: by the first note in
// which they differ (a datatype), else by its number.
func tell(tables []results.Table, k int) string {
	for i, n := range tables[k].Notes {
		for _, t := range tables {
			if i >= len(t.Notes) || t.Notes[i] != n {
				return n
			}
		}
	}
	return fmt.Sprintf("table %d", k+1)
}
