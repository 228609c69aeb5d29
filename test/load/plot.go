package load

import (
	"fmt"
	"image/color"
	"path/filepath"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// palette tells loads and processes apart; a proxied load and its direct twin share a
// colour, the direct one dashed.
var palette = []color.Color{
	color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff},
	color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff},
	color.RGBA{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff},
	color.RGBA{R: 0x94, G: 0x67, B: 0xbd, A: 0xff},
}

type line struct {
	name   string
	xy     plotter.XYs
	colour int
	dashed bool
}

// drawLines writes a PNG of lines against minutes, with a vertical mark where the faults
// began.
func drawLines(path, title, ylabel string, lines []line, logY bool, mark time.Duration) error {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = "minutes"
	p.Y.Label.Text = ylabel
	p.Legend.Top = true
	p.Legend.Left = true
	if logY {
		p.Y.Scale = plot.LogScale{}
		p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	}
	p.Add(plotter.NewGrid())
	ymax := 0.0
	for _, l := range lines {
		if len(l.xy) == 0 {
			continue
		}
		pl, err := plotter.NewLine(l.xy)
		if err != nil {
			return err
		}
		pl.Color = palette[l.colour%len(palette)]
		pl.Width = vg.Points(1.2)
		if l.dashed {
			pl.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
		}
		p.Add(pl)
		p.Legend.Add(l.name, pl)
		for _, pt := range l.xy {
			ymax = max(ymax, pt.Y)
		}
	}
	if mark > 0 && ymax > 0 {
		ymin := 0.0
		if logY {
			ymin = 0.1
		}
		m, err := plotter.NewLine(plotter.XYs{{X: mark.Minutes(), Y: ymin}, {X: mark.Minutes(), Y: ymax}})
		if err != nil {
			return err
		}
		m.Color = color.Gray{Y: 0x80}
		m.Dashes = []vg.Length{vg.Points(2), vg.Points(2)}
		p.Add(m)
		p.Legend.Add("faults begin", m)
	}
	p.Legend.TextStyle.Font.Size = vg.Points(8)
	p.Legend.ThumbnailWidth = vg.Points(20)
	p.Legend.Padding = vg.Points(1)
	p.Legend.YPosition = draw.PosTop
	return p.Save(20*vg.Centimeter, 10*vg.Centimeter, path)
}

// drawScenario writes the scenario's plots into dir, named after slug, and returns their
// file names.
func drawScenario(sc *Scenario, dir, slug string, twins map[string]int, direct map[string]bool) ([]string, error) {
	var latency, rate []line
	for _, l := range sc.Loads {
		pts := sc.Series[l.Name]
		var p99, ok plotter.XYs
		for _, pt := range pts {
			if pt.P99 > 0 {
				p99 = append(p99, plotter.XY{X: pt.At.Minutes(), Y: max(float64(pt.P99)/float64(time.Millisecond), 0.1)})
			}
			ok = append(ok, plotter.XY{X: pt.At.Minutes(), Y: pt.OKRate})
		}
		latency = append(latency, line{name: l.Name + " p99", xy: p99, colour: twins[l.Name], dashed: direct[l.Name]})
		rate = append(rate, line{name: l.Name, xy: ok, colour: twins[l.Name], dashed: direct[l.Name]})
	}
	var rss, gor, socks []line
	for i, name := range sc.Proxies { // the apiservers are in the table: they would dwarf the proxies
		var r, g, s plotter.XYs
		for _, ps := range sc.Procs[name] {
			r = append(r, plotter.XY{X: ps.At.Minutes(), Y: float64(ps.RSS) / (1 << 20)})
			if ps.Goroutines >= 0 {
				g = append(g, plotter.XY{X: ps.At.Minutes(), Y: float64(ps.Goroutines)})
			}
			s = append(s, plotter.XY{X: ps.At.Minutes(), Y: float64(ps.Sockets)})
		}
		rss = append(rss, line{name: name, xy: r, colour: i + 2})
		if len(g) > 0 {
			gor = append(gor, line{name: name, xy: g, colour: i + 2})
		}
		socks = append(socks, line{name: name, xy: s, colour: i + 2})
	}
	files := []string{slug + "-latency.png", slug + "-throughput.png", slug + "-memory.png", slug + "-goroutines.png", slug + "-sockets.png"}
	draws := []func(string) error{
		func(p string) error {
			return drawLines(p, sc.Name+": p99 latency of successful requests, per 10 s", "ms (log)", latency, true, sc.FaultsAt)
		},
		func(p string) error {
			return drawLines(p, sc.Name+": successful requests per second, per 10 s", "requests/s", rate, false, sc.FaultsAt)
		},
		func(p string) error {
			return drawLines(p, sc.Name+": resident memory of the proxies", "MiB", rss, false, sc.FaultsAt)
		},
		func(p string) error {
			return drawLines(p, sc.Name+": goroutines of the proxies", "goroutines", gor, false, sc.FaultsAt)
		},
		func(p string) error {
			return drawLines(p, sc.Name+": open sockets", "sockets", socks, false, sc.FaultsAt)
		},
	}
	for i, f := range files {
		if err := draws[i](filepath.Join(dir, f)); err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
	}
	return files, nil
}
