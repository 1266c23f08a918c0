package dashboard

import (
	"fmt"
	"math"
	"sort"
	"unicode/utf8"
)

// LayoutNode is one node to lay out: a step and the steps it depends on.
type LayoutNode struct {
	ID   string
	Deps []string
}

// Point is a position in the drawing, in SVG user units.
type Point struct{ X, Y float64 }

// PlacedNode is a laid-out node: its box is (X, Y)-(X+W, Y+H).
type PlacedNode struct {
	ID    string
	Layer int // 0 for nodes without dependencies; otherwise 1 + the largest layer of a dependency
	Order int // position inside its layer, left to right
	X, Y  float64
	W, H  float64
}

// Center returns the middle of the node's box.
func (n PlacedNode) Center() Point { return Point{n.X + n.W/2, n.Y + n.H/2} }

// PlacedEdge is a laid-out dependency edge from From (the dependency) to To (the dependent step). Points runs from
// the bottom of From through one bend point per layer the edge crosses to the top of To.
type PlacedEdge struct {
	From, To string
	Points   []Point
}

// Layout is a drawn DAG: nodes top to bottom by layer, edges pointing down.
type Layout struct {
	Width, Height float64
	Nodes         []PlacedNode // in input order
	Edges         []PlacedEdge // in input order of the dependent node, then of its dependencies
	Crossings     int          // edge crossings between adjacent layers after ordering
}

// Geometry of the drawing.
const (
	nodeHeight   = 36.0
	nodeMinWidth = 72.0
	nodeMaxWidth = 220.0
	charWidth    = 7.4 // average advance of the node font, used to size boxes
	nodePadding  = 24.0
	dummyWidth   = 12.0 // the slot a long edge occupies in a layer it passes through
	hGap         = 28.0
	vGap         = 56.0
	margin       = 16.0
	sweeps       = 24
)

// MaxLabelChars is the longest node label drawn in full; longer ones are shortened with an ellipsis.
const MaxLabelChars = 26 // (nodeMaxWidth - nodePadding) / charWidth, rounded down

// nodeWidth returns the box width for a label.
func nodeWidth(label string) float64 {
	w := float64(utf8.RuneCountInString(label))*charWidth + nodePadding
	return math.Max(nodeMinWidth, math.Min(nodeMaxWidth, w))
}

// ShortLabel returns label, shortened with an ellipsis when it does not fit a node box.
func ShortLabel(label string) string {
	if utf8.RuneCountInString(label) <= MaxLabelChars {
		return label
	}
	r := []rune(label)
	return string(r[:MaxLabelChars-1]) + "…"
}

// vertex is a node of the proper layered graph: a real node or a dummy on a long edge.
type vertex struct {
	real  int // index into the input nodes, -1 for a dummy
	layer int
	w     float64
	up    []int // vertices in layer-1 connected to this one
	down  []int // vertices in layer+1 connected to this one
	x     float64
}

// ComputeLayout lays out a DAG given in topological order (every dependency before its dependents, as step_index
// orders steps). It assigns layers by longest path from the roots, splits edges that span several layers with
// dummy vertices, orders every layer with alternating barycenter sweeps (keeping the order with the fewest
// crossings), then places the nodes left to right without overlap and centres each layer.
func ComputeLayout(nodes []LayoutNode) (*Layout, error) {
	index := make(map[string]int, len(nodes))
	for i, n := range nodes {
		if _, dup := index[n.ID]; dup {
			return nil, fmt.Errorf("dashboard: layout: node %q appears twice", n.ID)
		}
		index[n.ID] = i
	}

	// Longest-path layering.
	layerOf := make([]int, len(nodes))
	for i, n := range nodes {
		for _, d := range n.Deps {
			j, ok := index[d]
			if !ok {
				return nil, fmt.Errorf("dashboard: layout: node %q depends on unknown node %q", n.ID, d)
			}
			if j >= i {
				return nil, fmt.Errorf("dashboard: layout: node %q depends on %q, which is not listed before it", n.ID, d)
			}
			layerOf[i] = max(layerOf[i], layerOf[j]+1)
		}
	}
	layers := 0
	for _, l := range layerOf {
		layers = max(layers, l+1)
	}

	// The proper layered graph: real vertices first (same index as the input), then dummies.
	vs := make([]*vertex, len(nodes))
	for i, n := range nodes {
		vs[i] = &vertex{real: i, layer: layerOf[i], w: nodeWidth(n.ID)}
	}
	type chain struct {
		from, to int
		path     []int // vertices from the dependency to the dependent, inclusive
	}
	var chains []chain
	for i, n := range nodes {
		for _, d := range dedupe(n.Deps) {
			j := index[d]
			path := []int{j}
			prev := j
			for l := layerOf[j] + 1; l < layerOf[i]; l++ {
				vs = append(vs, &vertex{real: -1, layer: l, w: dummyWidth})
				cur := len(vs) - 1
				vs[prev].down = append(vs[prev].down, cur)
				vs[cur].up = append(vs[cur].up, prev)
				path = append(path, cur)
				prev = cur
			}
			vs[prev].down = append(vs[prev].down, i)
			vs[i].up = append(vs[i].up, prev)
			chains = append(chains, chain{from: j, to: i, path: append(path, i)})
		}
	}

	// Initial order: input order, dummies in creation order.
	order := make([][]int, layers)
	for v, x := range vs {
		order[x.layer] = append(order[x.layer], v)
	}
	best := cloneOrder(order)
	bestCross := crossings(vs, order)
	for it := 0; it < sweeps && bestCross > 0; it++ {
		if it%2 == 0 {
			for l := 1; l < layers; l++ {
				reorder(vs, order, l, func(x *vertex) []int { return x.up }, order[l-1])
			}
		} else {
			for l := layers - 2; l >= 0; l-- {
				reorder(vs, order, l, func(x *vertex) []int { return x.down }, order[l+1])
			}
		}
		if c := crossings(vs, order); c < bestCross {
			bestCross = c
			best = cloneOrder(order)
		}
	}
	order = best

	// Coordinates: layers top to bottom, each layer packed left to right and centred on the widest one.
	widths := make([]float64, layers)
	for l, row := range order {
		for k, v := range row {
			if k > 0 {
				widths[l] += hGap
			}
			widths[l] += vs[v].w
		}
	}
	maxW := 0.0
	for _, w := range widths {
		maxW = math.Max(maxW, w)
	}
	out := &Layout{
		Width:     maxW + 2*margin,
		Height:    float64(layers)*nodeHeight + float64(max(layers-1, 0))*vGap + 2*margin,
		Nodes:     make([]PlacedNode, len(nodes)),
		Crossings: bestCross,
	}
	if len(nodes) == 0 {
		out.Width, out.Height = 2*margin, 2*margin
	}
	for l, row := range order {
		x := margin + (maxW-widths[l])/2
		for k, v := range row {
			vs[v].x = x
			if r := vs[v].real; r >= 0 {
				out.Nodes[r] = PlacedNode{
					ID: nodes[r].ID, Layer: l, Order: k,
					X: x, Y: layerY(l), W: vs[v].w, H: nodeHeight,
				}
			}
			x += vs[v].w + hGap
		}
	}

	// Edges, in input order of the dependent node.
	for _, c := range chains {
		from := out.Nodes[c.from]
		to := out.Nodes[c.to]
		pts := []Point{{from.X + from.W/2, from.Y + from.H}}
		for _, v := range c.path[1 : len(c.path)-1] {
			cx := vs[v].x + vs[v].w/2
			pts = append(pts, Point{cx, layerY(vs[v].layer)}, Point{cx, layerY(vs[v].layer) + nodeHeight})
		}
		pts = append(pts, Point{to.X + to.W/2, to.Y})
		out.Edges = append(out.Edges, PlacedEdge{From: nodes[c.from].ID, To: nodes[c.to].ID, Points: pts})
	}
	return out, nil
}

func layerY(l int) float64 { return margin + float64(l)*(nodeHeight+vGap) }

func dedupe(s []string) []string {
	seen := make(map[string]bool, len(s))
	out := make([]string, 0, len(s))
	for _, x := range s {
		if !seen[x] {
			seen[x] = true
			out = append(out, x)
		}
	}
	return out
}

func cloneOrder(order [][]int) [][]int {
	out := make([][]int, len(order))
	for i, row := range order {
		out[i] = append([]int(nil), row...)
	}
	return out
}

// reorder sorts layer l by the barycenter of each vertex's neighbours in the fixed adjacent layer. A vertex
// without neighbours there keeps its current position as its key; ties keep the current order.
func reorder(vs []*vertex, order [][]int, l int, neighbours func(*vertex) []int, fixed []int) {
	pos := make(map[int]int, len(fixed))
	for k, v := range fixed {
		pos[v] = k
	}
	row := order[l]
	key := make(map[int]float64, len(row))
	for k, v := range row {
		ns := neighbours(vs[v])
		if len(ns) == 0 {
			key[v] = float64(k)
			continue
		}
		sum := 0.0
		for _, n := range ns {
			sum += float64(pos[n])
		}
		key[v] = sum / float64(len(ns))
	}
	sort.SliceStable(row, func(a, b int) bool { return key[row[a]] < key[row[b]] })
}

// crossings counts pairs of edges between adjacent layers that cross.
func crossings(vs []*vertex, order [][]int) int {
	total := 0
	for l := 0; l+1 < len(order); l++ {
		upper := make(map[int]int, len(order[l]))
		for k, v := range order[l] {
			upper[v] = k
		}
		lower := make(map[int]int, len(order[l+1]))
		for k, v := range order[l+1] {
			lower[v] = k
		}
		type seg struct{ a, b int }
		var segs []seg
		for _, v := range order[l] {
			for _, d := range vs[v].down {
				segs = append(segs, seg{upper[v], lower[d]})
			}
		}
		for i := range segs {
			for j := i + 1; j < len(segs); j++ {
				if (segs[i].a-segs[j].a)*(segs[i].b-segs[j].b) < 0 {
					total++
				}
			}
		}
	}
	return total
}

// EdgePath renders an edge's points as an SVG path: straight through the layers it passes and a vertical-tangent
// cubic curve between layers.
func EdgePath(pts []Point) string {
	if len(pts) == 0 {
		return ""
	}
	s := fmt.Sprintf("M%.1f %.1f", pts[0].X, pts[0].Y)
	for i := 1; i < len(pts); i++ {
		a, b := pts[i-1], pts[i]
		if a.X == b.X {
			s += fmt.Sprintf(" L%.1f %.1f", b.X, b.Y)
			continue
		}
		my := (a.Y + b.Y) / 2
		s += fmt.Sprintf(" C%.1f %.1f %.1f %.1f %.1f %.1f", a.X, my, b.X, my, b.X, b.Y)
	}
	return s
}
