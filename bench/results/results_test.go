package results

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func parseFile(t *testing.T, name string) []Table {
	t.Helper()
	f, err := os.Open(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tables, err := Parse(f, name)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return tables
}

// TestParse reads real outputs of every form and checks what each table
// holds.
func TestParse(t *testing.T) {
	for _, tc := range []struct {
		file    string
		tables  int
		title   string
		columns string // as printed, joined by "|"
		rows    int    // in the first table
		first   string // the first row's key
		sized   bool
	}{
		{"rivet-osu_latency.txt", 1, "OSU MPI Latency Test v7.4", "Size (bytes)|Avg Latency (us)", 11, "1", true},
		{"ompi-osu_latency.txt", 1, "OSU MPI Latency Test v7.4", "Size (bytes)|Avg Latency (us)", 11, "1", true},
		{"rivet-osu_bw.txt", 1, "OSU MPI Bandwidth Test v7.4", "Size (bytes)|Bandwidth (MB/s)", 17, "1", true},
		{"rivet-osu_allreduce-f.txt", 1, "OSU MPI Allreduce Latency Test v7.4", "Size (bytes)|Avg Latency (us)|Min Latency (us)|Max Latency (us)|Iterations", 9, "4", true},
		{"rivet-osu_fop_latency-all.txt", 3, "OSU MPI_Fetch_and_op latency Test v7.4", "Size (bytes)|Latency (us)", 1, "1", true},
		{"rivet-osu_init.txt", 1, "OSU MPI Init Test v7.4", "Processes|Min (ms)|Max (ms)|Avg (ms)", 1, "4", true},
		{"rivet-ft_recover.txt", 1, "Rivet Fault-Tolerance Recovery Test: 2 ranks", "Operation|Avg Latency (us)|Min Latency (us)|Max Latency (us)|Iterations", 7, "barrier", false},
		{"perftest-ib_write_lat.txt", 1, "RDMA_Write Latency Test", "Size (bytes)|#iterations|t_min (us)|t_max (us)|t_typical (us)|t_avg (us)|t_stdev (us)|99% percentile (us)|99.9% percentile (us)", 1, "8", true},
		{"perftest-ib_write_bw.txt", 1, "RDMA_Write BW Test", "Size (bytes)|#iterations|BW peak (MB/s)|BW average (MB/s)|MsgRate (Mpps)", 1, "65536", true},
		{"rivet-perf-write_lat.txt", 1, "RDMA_Write Latency Test", "Size (bytes)|#iterations|t_min (us)|t_max (us)|t_typical (us)|t_avg (us)|t_stdev (us)|99% percentile (us)|99.9% percentile (us)", 1, "8", true},
	} {
		t.Run(tc.file, func(t *testing.T) {
			tables := parseFile(t, tc.file)
			if len(tables) != tc.tables {
				t.Fatalf("%d tables, want %d", len(tables), tc.tables)
			}
			tb := tables[0]
			var cols []string
			for _, c := range tb.Columns {
				cols = append(cols, c.String())
			}
			if tb.Title != tc.title || strings.Join(cols, "|") != tc.columns || len(tb.Rows) != tc.rows || tb.Rows[0].Key != tc.first || tb.Sized() != tc.sized {
				t.Errorf("got %q, columns %q, %d rows from %q, sized %v", tb.Title, strings.Join(cols, "|"), len(tb.Rows), tb.Rows[0].Key, tb.Sized())
			}
			for _, r := range tb.Rows {
				if len(r.Values) != len(tb.Columns)-1 {
					t.Errorf("row %q: %d values for %d columns", r.Key, len(r.Values), len(tb.Columns))
				}
			}
		})
	}
	for file, want := range map[string]string{"perftest-ib_write_lat.txt": "t_typical (us)", "perftest-ib_write_bw.txt": "BW average (MB/s)",
		"rivet-osu_allreduce-f.txt": "Avg Latency (us)", "rivet-osu_bw.txt": "Bandwidth (MB/s)"} {
		tb := parseFile(t, file)[0]
		if i, err := tb.Column(""); err != nil || tb.Columns[1+i].String() != want {
			t.Errorf("%s: the default column is %d (%v), want %q", file, i, err, want)
		}
	}
	if i, err := parseFile(t, "perftest-ib_write_lat.txt")[0].Column("99.9"); err != nil || i != 7 {
		t.Errorf("Column(\"99.9\") = %d, %v", i, err)
	}
	fop := parseFile(t, "rivet-osu_fop_latency-all.txt")
	if got := fop[2].Notes; !reflect.DeepEqual(got, []string{"Window creation: MPI_Win_allocate", "Synchronization: MPI_Win_flush", "Datatype: MPI_FLOAT."}) {
		t.Errorf("notes of the third table: %q", got)
	}
}

// TestRoundTrip: JSON and CSV give back the same tables.
func TestRoundTrip(t *testing.T) {
	for _, file := range []string{"rivet-osu_latency.txt", "rivet-osu_init.txt", "rivet-osu_allreduce-f.txt", "rivet-osu_fop_latency-all.txt", "rivet-ft_recover.txt", "perftest-ib_write_bw.txt"} {
		tables := parseFile(t, file)
		var j, c bytes.Buffer
		if err := WriteJSON(&j, tables); err != nil {
			t.Fatal(err)
		}
		back, err := Parse(bytes.NewReader(j.Bytes()), file+".json")
		if err != nil {
			t.Fatalf("%s: %v\n%s", file, err, j.String())
		}
		if !reflect.DeepEqual(back, tables) {
			t.Errorf("%s: JSON gave back\n%+v\nwant\n%+v", file, back, tables)
		}
		if err := WriteCSV(&c, tables); err != nil {
			t.Fatal(err)
		}
		back, err = Parse(bytes.NewReader(c.Bytes()), file+".csv")
		if err != nil {
			t.Fatalf("%s: %v\n%s", file, err, c.String())
		}
		if !reflect.DeepEqual(back, tables) {
			t.Errorf("%s: CSV gave back\n%+v\nwant\n%+v", file, back, tables)
		}
	}
}

// TestBadInput: every malformed input is an error that names the input
// and the line.
func TestBadInput(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"", "x.txt is empty"},
		{"hello\n", "x.txt:1: \"hello\" is not the start"},
		{"\n\n# OSU MPI Latency Test v7.4\n# Size          Latency (us)\n1   0.5\n2   zero\n", "x.txt:6: \"zero\" is not a number"},
		{"# OSU MPI Latency Test v7.4\n# Size          Latency (us)\n1   0.5   7\n", "x.txt:3: 3 fields, want 2"},
		{"# OSU MPI Latency Test v7.4\n1   0.5\n", "x.txt:2: a row before any column header"},
		{"# OSU MPI Latency Test v7.4\n# Size          Latency (us)\n", "x.txt has no rows"},
		{"-----\n RDMA_Write Latency Test\n-----\n #bytes #iterations    t_min[usec]\n 8  1000\n", "x.txt:5: 2 fields, want 3"},
		{"{\"format\": \"rivet-results/1\",\n \"tables\": [\n}", "x.txt:3: invalid character"},
		{"{\"format\": \"other\", \"tables\": []}", "x.txt:1: format \"other\""},
		{"test,Size (bytes),Latency (us)\nt,1,0.5\nt,2\n", "x.txt:3: 2 fields, want 3"},
		{"test,Size (bytes),Latency (us)\nt,1,fast\n", "x.txt:2: \"fast\" is not a number"},
	} {
		_, err := Parse(strings.NewReader(tc.in), "x.txt")
		if !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Parse(%q) = %v, want an ErrFormat with %q", tc.in, err, tc.want)
		}
	}
}
