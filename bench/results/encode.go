package results

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// jsonFormat names WriteJSON's form and its version.
const jsonFormat = "rivet-results/1"

// document is WriteJSON's form.
type document struct {
	Format string  `json:"format"`
	Tables []Table `json:"tables"`
}

// WriteJSON writes tables as one JSON document:
//
//	{"format": "rivet-results/1", "tables": [{"title": "OSU MPI Latency Test v7.4",
//	  "notes": ["Datatype: MPI_CHAR."],
//	  "columns": [{"name": "Size", "unit": "bytes"}, {"name": "Avg Latency", "unit": "us"}],
//	  "rows": [[1, 0.21], [2, 0.21]]}]}
//
// A row is its key (a number when it is one, else a string) and then
// its values.
func WriteJSON(w io.Writer, tables []Table) error {
	var b bytes.Buffer
	fmt.Fprintf(&b, "{\"format\": %q, \"tables\": [", jsonFormat)
	for i, t := range tables {
		if i > 0 {
			b.WriteString(",")
		}
		head := struct {
			Title   string   `json:"title"`
			Notes   []string `json:"notes,omitempty"`
			Columns []Column `json:"columns"`
		}{t.Title, t.Notes, t.Columns}
		h, err := json.Marshal(head)
		if err != nil {
			return err
		}
		// One row per line: the head's closing brace gives way to the rows.
		b.WriteString("\n  ")
		b.Write(h[:len(h)-1])
		b.WriteString(`, "rows": [`)
		for j, r := range t.Rows {
			m, err := r.MarshalJSON()
			if err != nil {
				return err
			}
			if j > 0 {
				b.WriteString(",")
			}
			b.WriteString("\n    ")
			b.Write(m)
		}
		b.WriteString("]}")
	}
	b.WriteString("]}\n")
	_, err := w.Write(b.Bytes())
	return err
}

// MarshalJSON writes r as an array: its key, then its values.
func (r Row) MarshalJSON() ([]byte, error) {
	a := make([]any, 0, 1+len(r.Values))
	if v, ok := r.Size(); ok {
		a = append(a, json.Number(strconv.FormatFloat(v, 'g', -1, 64)))
	} else {
		a = append(a, r.Key)
	}
	for _, v := range r.Values {
		a = append(a, v)
	}
	return json.Marshal(a)
}

// UnmarshalJSON reads MarshalJSON's form.
func (r *Row) UnmarshalJSON(b []byte) error {
	var a []json.RawMessage
	if err := json.Unmarshal(b, &a); err != nil {
		return err
	}
	if len(a) == 0 {
		return fmt.Errorf("an empty row")
	}
	var key json.Number
	if err := json.Unmarshal(a[0], &key); err == nil {
		r.Key = key.String()
	} else if err := json.Unmarshal(a[0], &r.Key); err != nil {
		return fmt.Errorf("a row's key is %s, not a number or a string", a[0])
	}
	r.Values = make([]float64, len(a)-1)
	for i, m := range a[1:] {
		if err := json.Unmarshal(m, &r.Values[i]); err != nil {
			return fmt.Errorf("a row's value %s is not a number", m)
		}
	}
	return nil
}

// WriteCSV writes tables as CSV: a header row ("test", then the
// columns as printed), then a row per result, led by the table's title
// and notes joined by "; " (which tell apart the tables of one test, such
// as its datatypes); a table whose columns differ from the one before
// starts with a header row of its own.
func WriteCSV(w io.Writer, tables []Table) error {
	cw := csv.NewWriter(w)
	var last []Column
	for _, t := range tables {
		if !sameColumns(t.Columns, last) {
			hdr := []string{"test"}
			for _, c := range t.Columns {
				hdr = append(hdr, c.String())
			}
			if err := cw.Write(hdr); err != nil {
				return err
			}
			last = t.Columns
		}
		for _, r := range t.Rows {
			rec := []string{strings.Join(append([]string{t.Title}, t.Notes...), "; "), r.Key}
			for _, v := range r.Values {
				rec = append(rec, strconv.FormatFloat(v, 'g', -1, 64))
			}
			if err := cw.Write(rec); err != nil {
				return err
			}
		}
	}
	cw.Flush()
	return cw.Error()
}

func sameColumns(a, b []Column) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// parseCSV reads WriteCSV's form.
func parseCSV(data []byte, name string) ([]Table, error) {
	cr := csv.NewReader(bytes.NewReader(data))
	cr.FieldsPerRecord = -1
	var tables []Table
	var cols []Column
	var test string // the last row's first field
	for {
		rec, err := cr.Read()
		if err == io.EOF {
			return tables, nil
		}
		line, _ := cr.FieldPos(0)
		if err != nil {
			return nil, fmt.Errorf("%w: %s:%d: %v", ErrFormat, name, line, err)
		}
		if rec[0] == "test" {
			if len(rec) < 3 {
				return nil, fmt.Errorf("%w: %s:%d: a header of %d columns, want a key and a value at least", ErrFormat, name, line, len(rec)-1)
			}
			cols = cols[:0:0]
			for _, h := range rec[1:] {
				cols = append(cols, splitUnit(h))
			}
			continue
		}
		if cols == nil {
			return nil, fmt.Errorf("%w: %s:%d: a row before the header", ErrFormat, name, line)
		}
		if len(rec) != 1+len(cols) {
			return nil, fmt.Errorf("%w: %s:%d: %d fields, want %d", ErrFormat, name, line, len(rec), 1+len(cols))
		}
		if len(tables) == 0 || test != rec[0] || !sameColumns(tables[len(tables)-1].Columns, cols) {
			parts := strings.Split(rec[0], "; ")
			tables = append(tables, Table{Title: parts[0], Notes: parts[1:], Columns: cols})
			if len(parts) == 1 {
				tables[len(tables)-1].Notes = nil
			}
			test = rec[0]
		}
		row := Row{Key: rec[1]}
		for _, s := range rec[2:] {
			v, err := strconv.ParseFloat(s, 64)
			if err != nil {
				return nil, fmt.Errorf("%w: %s:%d: %q is not a number", ErrFormat, name, line, s)
			}
			row.Values = append(row.Values, v)
		}
		t := &tables[len(tables)-1]
		t.Rows = append(t.Rows, row)
	}
}
