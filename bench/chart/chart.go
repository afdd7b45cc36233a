// Package chart draws benchmark results (package results' tables) as
// curves: one series per table, the message size on a log-2 axis, the
// measure on a labelled axis, and, when two series are drawn, a panel of
// their ratio. It is what rivet plot draws with, on gonum's plot.
package chart

import (
	"errors"
	"fmt"
	"image/color"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgsvg"

	"github.com/rivet-hpc/rivet/bench/results"
)

// ErrChart is wrapped by errors about what cannot be drawn.
var ErrChart = errors.New("chart: cannot draw")

// Series is one curve: a table's sizes against one of its columns.
type Series struct {
	Label string
	Table results.Table
	// Column is the measure drawn, an index among the table's value
	// columns (results.Table.Column finds one by name).
	Column int
}

// Options say how to draw.
type Options struct {
	Title  string // default: the first series' table title
	Linear bool   // a linear measure axis (default: logarithmic when every value is positive)
	// Format is "svg" or "png".
	Format string
	// Width and Height of the picture (default 16 by 12 cm; a ratio
	// panel adds a third).
	Width, Height vg.Length
}

// Draw writes the chart of series to w.
func Draw(w io.Writer, series []Series, o Options) error {
	if len(series) == 0 {
		return fmt.Errorf("%w: no series", ErrChart)
	}
	col := func(s Series) results.Column { return s.Table.Columns[1+s.Column] }
	for _, s := range series {
		if !s.Table.Sized() {
			return fmt.Errorf("%w: %s: %q has no sizes to draw against (its rows are %s)", ErrChart, s.Label, s.Table.Title, keys(s.Table))
		}
		if s.Column < 0 || 1+s.Column >= len(s.Table.Columns) {
			return fmt.Errorf("%w: %s: no value column %d", ErrChart, s.Label, s.Column)
		}
		if u, u0 := col(s).Unit, col(series[0]).Unit; u != u0 {
			return fmt.Errorf("%w: %s is in %q and %s in %q: one axis cannot hold both", ErrChart, series[0].Label, u0, s.Label, u)
		}
	}
	if o.Width == 0 {
		o.Width = 16 * vg.Centimeter
	}
	if o.Height == 0 {
		o.Height = 12 * vg.Centimeter
	}
	title := o.Title
	if title == "" {
		title = series[0].Table.Title
	}

	top := plot.New()
	top.Title.Text = title
	top.X.Label.Text = keyLabel(series[0].Table)
	top.Y.Label.Text = col(series[0]).String()
	logY := !o.Linear
	for _, s := range series {
		for _, r := range s.Table.Rows {
			if r.Values[s.Column] <= 0 {
				logY = false
			}
		}
	}
	sizeAxis(top)
	if logY {
		top.Y.Scale = plot.LogScale{}
		top.Y.Tick.Marker = logTicks{}
	}
	top.Legend.Top = true
	top.Legend.Left = increasing(series[0])
	for i, s := range series {
		line, points, err := plotter.NewLinePoints(xys(s))
		if err != nil {
			return fmt.Errorf("chart: %s: %w", s.Label, err)
		}
		line.Color = plotutil.Color(i)
		points.Color = plotutil.Color(i)
		points.Shape = plotutil.Shape(i)
		top.Add(line, points)
		top.Legend.Add(s.Label, line, points)
	}
	top.Add(plotter.NewGrid())

	height := o.Height
	var ratio *plot.Plot
	if len(series) == 2 {
		var err error
		if ratio, err = ratioPlot(series[0], series[1]); err != nil {
			return err
		}
		height += o.Height / 3
	}

	var c vg.CanvasWriterTo
	switch o.Format {
	case "svg", "":
		c = vgsvg.New(o.Width, height)
	case "png":
		c = vgimg.PngCanvas{Canvas: vgimg.NewWith(vgimg.UseWH(o.Width, height), vgimg.UseDPI(150), vgimg.UseBackgroundColor(color.White))}
	default:
		return fmt.Errorf("%w: format %q (svg or png)", ErrChart, o.Format)
	}
	dc := draw.New(c)
	if ratio == nil {
		top.Draw(dc)
	} else {
		// Three rows of tiles, aligned: the curves take two, the ratio
		// one, and the data areas line up on the size axis.
		t := draw.Tiles{Rows: 3, Cols: 1}
		cs := plot.Align([][]*plot.Plot{{top}, {top}, {ratio}}, t, dc)
		upper := cs[0][0]
		upper.Min.Y = cs[1][0].Min.Y
		top.Draw(upper)
		ratio.Draw(cs[2][0])
	}
	_, err := c.WriteTo(w)
	return err
}

// ratioPlot is the panel of a's values over b's at the sizes both have.
func ratioPlot(a, b Series) (*plot.Plot, error) {
	bv := map[float64]float64{}
	for _, r := range b.Table.Rows {
		x, _ := r.Size()
		bv[x] = r.Values[b.Column]
	}
	var pts plotter.XYs
	for _, r := range a.Table.Rows {
		x, _ := r.Size()
		if d, ok := bv[x]; ok && d != 0 && x > 0 {
			pts = append(pts, plotter.XY{X: x, Y: r.Values[a.Column] / d})
		}
	}
	if len(pts) == 0 {
		return nil, fmt.Errorf("%w: %s and %s have no size in common to compare", ErrChart, a.Label, b.Label)
	}
	p := plot.New()
	p.X.Label.Text = keyLabel(a.Table)
	p.Title.Text = a.Label + " / " + b.Label
	p.Y.Label.Text = "ratio"
	sizeAxis(p)
	lo, hi := 1.0, 1.0
	for _, q := range pts {
		lo, hi = min(lo, q.Y), max(hi, q.Y)
	}
	p.Y.Min, p.Y.Max = lo-(hi-lo)*0.05, hi+(hi-lo)*0.05
	one := plotter.NewFunction(func(float64) float64 { return 1 })
	one.Dashes = []vg.Length{vg.Points(4), vg.Points(2)}
	one.Color = color.Gray{Y: 96}
	line, points, err := plotter.NewLinePoints(pts)
	if err != nil {
		return nil, err
	}
	line.Color, points.Color = color.Black, color.Black
	p.Add(plotter.NewGrid(), one, line, points)
	return p, nil
}

// keyLabel names the axis of t's sizes: its key column's header, or
// bytes for a message size (OSU's "Size" and perftest's "#bytes").
func keyLabel(t results.Table) string {
	if len(t.Columns) == 0 {
		return "Size (bytes)"
	}
	switch c := t.Columns[0]; {
	case c.Unit != "" && c.Unit != c.Name:
		return c.String()
	case strings.EqualFold(c.Name, "size"), strings.Contains(c.Name, "bytes"):
		return "Size (bytes)"
	default:
		return c.Name
	}
}

// sizeAxis makes p's X a log-2 size axis, its ticks at powers of two
// (every one, or every other or fourth on a wide range) labelled 1, 2,
// ..., 1K, ..., 1M, ..., 1G.
func sizeAxis(p *plot.Plot) {
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = plot.TickerFunc(func(lo, hi float64) []plot.Tick {
		lo, hi = math.Max(lo, 1), math.Max(hi, 1)
		a, b := int(math.Floor(math.Log2(lo))), int(math.Ceil(math.Log2(hi)))
		step := 1
		for (b-a)/step > 12 {
			step *= 2
		}
		var ts []plot.Tick
		for e := a; e <= b; e++ {
			t := plot.Tick{Value: math.Exp2(float64(e))}
			if e%step == 0 {
				t.Label = sizeLabel(e)
			}
			ts = append(ts, t)
		}
		return ts
	})
}

func sizeLabel(e int) string {
	for _, u := range []struct {
		shift int
		name  string
	}{{30, "G"}, {20, "M"}, {10, "K"}} {
		if e >= u.shift {
			return fmt.Sprintf("%d%s", 1<<(e-u.shift), u.name)
		}
	}
	return fmt.Sprint(1 << e)
}

// logTicks marks 1 to 9 times each power of ten, and labels the powers;
// on a range of a decade or two the 2s and 5s too, on less than a decade
// every mark.
type logTicks struct{}

func (logTicks) Ticks(lo, hi float64) []plot.Tick {
	a, b := math.Floor(math.Log10(lo)), math.Ceil(math.Log10(hi))
	var ts []plot.Tick
	for e := a; e <= b; e++ {
		p := math.Pow(10, e)
		for m := 1.0; m <= 9; m++ {
			t := plot.Tick{Value: m * p}
			if m == 1 || b-a <= 2 && (m == 2 || m == 5) || hi/lo < 10 {
				t.Label = strconv.FormatFloat(m*p, 'g', -1, 64)
			}
			ts = append(ts, t)
		}
	}
	return ts
}

func xys(s Series) plotter.XYs {
	pts := make(plotter.XYs, 0, len(s.Table.Rows))
	for _, r := range s.Table.Rows {
		if x, _ := r.Size(); x > 0 { // (size 0 has no place on a log axis)
			pts = append(pts, plotter.XY{X: x, Y: r.Values[s.Column]})
		}
	}
	slices.SortFunc(pts, func(a, b plotter.XY) int { return int(math.Copysign(1, a.X-b.X)) })
	return pts
}

// increasing reports whether s's last value exceeds its first (a curve
// that ends high wants the legend at the top left).
func increasing(s Series) bool {
	r := s.Table.Rows
	return len(r) > 1 && r[len(r)-1].Values[s.Column] > r[0].Values[s.Column]
}

func keys(t results.Table) string {
	var k []string
	for i, r := range t.Rows {
		if i == 4 {
			k = append(k, "...")
			break
		}
		k = append(k, fmt.Sprintf("%q", r.Key))
	}
	return strings.Join(k, ", ")
}
