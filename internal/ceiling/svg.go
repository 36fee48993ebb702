package ceiling

import (
	"bufio"
	"fmt"
	"html"
	"io"
	"math"
	"strconv"
	"strings"
)

// Point is one (x, y) value of a series.
type Point struct{ X, Y float64 }

// Series is one line of a chart.
type Series struct {
	Name   string
	Points []Point
	// Dashed draws a dashed line without markers (a model's prediction); otherwise the
	// points are marked and joined.
	Dashed bool
}

// Chart is a line chart written as a self-contained SVG: no scripts, no fonts to fetch,
// deterministic output (golden-testable).
type Chart struct {
	Title, XLabel, YLabel string
	// LogX: a logarithmic x axis (link rates); ticks at 1, 2 and 5 per decade.
	LogX bool
	// XTicks: where to put x ticks; nil picks them.
	XTicks []float64
	// Width and Height in pixels; 0 means 720 by 400.
	Width, Height int
	Series        []Series
	// Source says where the chart's runs come from (host, cores, kernel, date, run
	// length: Provenance), drawn under the title; "" for none.
	Source string
	// Bands are x ranges shaded behind the series, each with its label (the link rates
	// where the link, not the CPU, is the limit).
	Bands []Band
}

// Band is a shaded x range of a chart.
type Band struct {
	From, To float64
	Label    string
}

// palette: distinguishable on white and in grey print.
var palette = []string{"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf"}

// WriteSVG draws the chart.
func (c Chart) WriteSVG(w io.Writer) error {
	W, H := c.Width, c.Height
	if W <= 0 {
		W = 720
	}
	if H <= 0 {
		H = 400
	}
	const left, right, bottom = 70.0, 230.0, 50.0
	top := 36.0
	if c.Source != "" {
		top = 48 // room for the source line under the title
	}
	pw, ph := float64(W)-left-right, float64(H)-top-bottom

	xmin, xmax, ymax := math.Inf(1), math.Inf(-1), 0.0
	for _, s := range c.Series {
		for _, p := range s.Points {
			if !finite(p.X) || !finite(p.Y) || (c.LogX && p.X <= 0) {
				continue
			}
			xmin, xmax, ymax = math.Min(xmin, p.X), math.Max(xmax, p.X), math.Max(ymax, p.Y)
		}
	}
	for _, t := range c.XTicks {
		if !c.LogX || t > 0 {
			xmin, xmax = math.Min(xmin, t), math.Max(xmax, t)
		}
	}
	if math.IsInf(xmin, 1) {
		xmin, xmax = 0, 1
	}
	if xmax == xmin {
		xmax = xmin + 1
	}
	ystep := niceStep(ymax / 5)
	ytop := math.Ceil(ymax/ystep) * ystep
	if ytop <= 0 {
		ytop, ystep = 1, 0.2
	}
	tx := func(x float64) float64 {
		if c.LogX {
			return left + pw*(math.Log10(x)-math.Log10(xmin))/(math.Log10(xmax)-math.Log10(xmin))
		}
		return left + pw*(x-xmin)/(xmax-xmin)
	}
	ty := func(y float64) float64 { return top + ph*(1-y/ytop) }

	b := bufio.NewWriter(w)
	fmt.Fprintf(b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", W, H, W, H)
	fmt.Fprintf(b, `<rect width="%d" height="%d" fill="white"/>`+"\n", W, H)
	fmt.Fprintf(b, `<text x="%s" y="20" font-size="14" font-weight="bold">%s</text>`+"\n", num(left), esc(c.Title))
	if c.Source != "" {
		fmt.Fprintf(b, `<text x="%s" y="36" font-size="10" fill="#555">%s</text>`+"\n", num(left), esc(c.Source))
	}
	for _, band := range c.Bands {
		lo, hi := math.Max(band.From, xmin), math.Min(band.To, xmax)
		if !(hi > lo) || (c.LogX && lo <= 0) {
			continue
		}
		fmt.Fprintf(b, `<rect x="%s" y="%s" width="%s" height="%s" fill="#fdebd0"/>`+"\n", num(tx(lo)), num(top), num(tx(hi)-tx(lo)), num(ph))
		fmt.Fprintf(b, `<text x="%s" y="%s" font-size="10" fill="#a0522d" text-anchor="middle">%s</text>`+"\n", num((tx(lo)+tx(hi))/2), num(top+12), esc(band.Label))
	}
	// Grid and y ticks.
	for y := 0.0; y <= ytop+ystep/2; y += ystep {
		fmt.Fprintf(b, `<line x1="%s" y1="%s" x2="%s" y2="%s" stroke="#ddd"/>`+"\n", num(left), num(ty(y)), num(left+pw), num(ty(y)))
		fmt.Fprintf(b, `<text x="%s" y="%s" text-anchor="end">%s</text>`+"\n", num(left-6), num(ty(y)+4), esc(shortNum(y)))
	}
	// X ticks.
	xt := c.XTicks
	if xt == nil {
		xt = autoTicks(xmin, xmax, c.LogX)
	}
	for _, x := range xt {
		if x < xmin || x > xmax || (c.LogX && x <= 0) {
			continue
		}
		fmt.Fprintf(b, `<line x1="%s" y1="%s" x2="%s" y2="%s" stroke="#999"/>`+"\n", num(tx(x)), num(top+ph), num(tx(x)), num(top+ph+5))
		label := shortNum(x)
		if c.LogX {
			label = FormatBits(x)
		}
		fmt.Fprintf(b, `<text x="%s" y="%s" text-anchor="middle">%s</text>`+"\n", num(tx(x)), num(top+ph+18), esc(label))
	}
	fmt.Fprintf(b, `<rect x="%s" y="%s" width="%s" height="%s" fill="none" stroke="#333"/>`+"\n", num(left), num(top), num(pw), num(ph))
	fmt.Fprintf(b, `<text x="%s" y="%s" text-anchor="middle">%s</text>`+"\n", num(left+pw/2), num(float64(H)-10), esc(c.XLabel))
	fmt.Fprintf(b, `<text x="16" y="%s" text-anchor="middle" transform="rotate(-90 16 %s)">%s</text>`+"\n", num(top+ph/2), num(top+ph/2), esc(c.YLabel))
	// Series.
	for i, s := range c.Series {
		col := palette[i%len(palette)]
		var pts []string
		for _, p := range s.Points {
			if finite(p.X) && finite(p.Y) && (!c.LogX || p.X > 0) {
				pts = append(pts, num(tx(p.X))+","+num(ty(p.Y)))
			}
		}
		dash := ""
		if s.Dashed {
			dash = ` stroke-dasharray="6 4"`
		}
		if len(pts) > 1 {
			fmt.Fprintf(b, `<polyline fill="none" stroke="%s" stroke-width="2"%s points="%s"/>`+"\n", col, dash, strings.Join(pts, " "))
		}
		if !s.Dashed {
			for _, p := range pts {
				x, y, _ := strings.Cut(p, ",")
				fmt.Fprintf(b, `<circle cx="%s" cy="%s" r="3.5" fill="%s"/>`+"\n", x, y, col)
			}
		}
		ly := top + 14 + 18*float64(i)
		fmt.Fprintf(b, `<line x1="%s" y1="%s" x2="%s" y2="%s" stroke="%s" stroke-width="2"%s/>`+"\n", num(left+pw+10), num(ly-4), num(left+pw+30), num(ly-4), col, dash)
		fmt.Fprintf(b, `<text x="%s" y="%s">%s</text>`+"\n", num(left+pw+35), num(ly), esc(s.Name))
	}
	b.WriteString("</svg>\n")
	return b.Flush()
}

func finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }

// num formats a coordinate with at most one decimal.
func num(v float64) string { return strconv.FormatFloat(math.Round(v*10)/10, 'f', -1, 64) }

func esc(s string) string { return html.EscapeString(s) }

// niceStep rounds a raw step up to 1, 2 or 5 times a power of ten.
func niceStep(raw float64) float64 {
	if raw <= 0 || !finite(raw) {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5, 10} {
		if raw <= m*p {
			return m * p
		}
	}
	return 10 * p
}

// autoTicks picks x ticks: 1-2-5 steps, or 1, 2, 5 per decade on a log axis.
func autoTicks(lo, hi float64, logx bool) []float64 {
	var t []float64
	if logx {
		for d := math.Pow(10, math.Floor(math.Log10(lo))); d <= hi; d *= 10 {
			for _, m := range []float64{1, 2, 5} {
				if v := d * m; v >= lo && v <= hi {
					t = append(t, v)
				}
			}
		}
		if len(t) > 6 { // labels like "200mbit" would overlap: decades only
			var d []float64
			for _, v := range t {
				if m := v / math.Pow(10, math.Floor(math.Log10(v)+1e-9)); math.Abs(m-1) < 1e-9 {
					d = append(d, v)
				}
			}
			t = d
		}
		return t
	}
	step := niceStep((hi - lo) / 8)
	for v := math.Ceil(lo/step) * step; v <= hi+step/1e6; v += step {
		t = append(t, v)
	}
	return t
}

// shortNum prints an axis value: 950, 12k, 1.5M.
func shortNum(v float64) string {
	a := math.Abs(v)
	switch {
	case a >= 1e9:
		return trimFloat(v/1e9) + "G"
	case a >= 1e6:
		return trimFloat(v/1e6) + "M"
	case a >= 1e3:
		return trimFloat(v/1e3) + "k"
	}
	return trimFloat(v)
}
