package dashboard_test

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pgflow-go/pgflow/internal/dashboard"
)

// checkLayout verifies the geometric promises of a layout: boxes inside the drawing, no two boxes overlapping,
// layers by longest path, every layer on its own row, and every edge running down from its dependency to its
// dependent without ever going up.
func checkLayout(t *testing.T, nodes []dashboard.LayoutNode, lay *dashboard.Layout) {
	t.Helper()
	require.Len(t, lay.Nodes, len(nodes))
	byID := make(map[string]dashboard.PlacedNode)
	for i, n := range lay.Nodes {
		require.Equal(t, nodes[i].ID, n.ID, "nodes come back in input order")
		byID[n.ID] = n
		require.GreaterOrEqual(t, n.X, 0.0)
		require.GreaterOrEqual(t, n.Y, 0.0)
		require.LessOrEqual(t, n.X+n.W, lay.Width)
		require.LessOrEqual(t, n.Y+n.H, lay.Height)
		require.Positive(t, n.W)
		require.Positive(t, n.H)
	}
	for i, a := range lay.Nodes {
		for _, b := range lay.Nodes[i+1:] {
			overlap := a.X < b.X+b.W && b.X < a.X+a.W && a.Y < b.Y+b.H && b.Y < a.Y+a.H
			require.False(t, overlap, "nodes %q %+v and %q %+v overlap", a.ID, a, b.ID, b)
			if a.Layer == b.Layer {
				require.Equal(t, a.Y, b.Y, "one row per layer")
				require.NotEqual(t, a.Order, b.Order)
			} else {
				require.NotEqual(t, a.Y, b.Y)
			}
		}
	}
	edges := 0
	for _, n := range nodes {
		want := 0
		for _, d := range n.Deps {
			want = max(want, byID[d].Layer+1)
		}
		require.Equal(t, want, byID[n.ID].Layer, "layer of %q is its longest path from a root", n.ID)
		edges += len(dedupe(n.Deps))
	}
	require.Len(t, lay.Edges, edges)
	for _, e := range lay.Edges {
		from, to := byID[e.From], byID[e.To]
		require.Less(t, from.Layer, to.Layer, "edge %s->%s goes to a later layer", e.From, e.To)
		require.Greater(t, to.Y, from.Y, "edge %s->%s goes down", e.From, e.To)
		require.GreaterOrEqual(t, len(e.Points), 2)
		// One bend pair per layer crossed.
		require.Len(t, e.Points, 2+2*(to.Layer-from.Layer-1), "edge %s->%s", e.From, e.To)
		require.Equal(t, dashboard.Point{X: from.X + from.W/2, Y: from.Y + from.H}, e.Points[0])
		require.Equal(t, dashboard.Point{X: to.X + to.W/2, Y: to.Y}, e.Points[len(e.Points)-1])
		for k := 1; k < len(e.Points); k++ {
			require.GreaterOrEqual(t, e.Points[k].Y, e.Points[k-1].Y, "edge %s->%s never goes up", e.From, e.To)
		}
		// A long edge passes through its layers where no node is.
		for k := 1; k+1 < len(e.Points); k += 2 {
			p := e.Points[k]
			for _, n := range lay.Nodes {
				inside := p.X >= n.X && p.X <= n.X+n.W && p.Y >= n.Y && p.Y <= n.Y+n.H
				require.False(t, inside, "edge %s->%s runs through node %s", e.From, e.To, n.ID)
			}
		}
	}
}

func dedupe(s []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, x := range s {
		if !seen[x] {
			seen[x] = true
			out = append(out, x)
		}
	}
	return out
}

func TestLayoutDiamondAndLongEdge(t *testing.T) {
	t.Parallel()
	nodes := []dashboard.LayoutNode{
		{ID: "a"},
		{ID: "b", Deps: []string{"a"}},
		{ID: "c", Deps: []string{"a"}},
		{ID: "d", Deps: []string{"b", "c"}},
		{ID: "e", Deps: []string{"a", "d"}}, // a->e spans three layers
	}
	lay, err := dashboard.ComputeLayout(nodes)
	require.NoError(t, err)
	checkLayout(t, nodes, lay)
	layers := map[string]int{}
	for _, n := range lay.Nodes {
		layers[n.ID] = n.Layer
	}
	require.Equal(t, map[string]int{"a": 0, "b": 1, "c": 1, "d": 2, "e": 3}, layers)
	require.Zero(t, lay.Crossings)
}

// TestLayoutBarycenterRemovesCrossings: in input order, c (under b) comes first and d (under a) second, so the
// edges cross; ordering by barycenter uncrosses them.
func TestLayoutBarycenterRemovesCrossings(t *testing.T) {
	t.Parallel()
	nodes := []dashboard.LayoutNode{
		{ID: "a"}, {ID: "b"},
		{ID: "c", Deps: []string{"b"}},
		{ID: "d", Deps: []string{"a"}},
		{ID: "e", Deps: []string{"d"}},
		{ID: "f", Deps: []string{"c"}},
	}
	lay, err := dashboard.ComputeLayout(nodes)
	require.NoError(t, err)
	checkLayout(t, nodes, lay)
	require.Zero(t, lay.Crossings)
	pos := map[string]float64{}
	for _, n := range lay.Nodes {
		pos[n.ID] = n.X
	}
	// Children sit on the same side as their parents.
	require.Equal(t, pos["a"] < pos["b"], pos["d"] < pos["c"])
	require.Equal(t, pos["d"] < pos["c"], pos["e"] < pos["f"])
}

// TestLayoutTwist: a bipartite "twist" whose input order crosses every pair of edges is untangled completely.
func TestLayoutTwist(t *testing.T) {
	t.Parallel()
	// Layer 1 in input order is the reverse of what layer 0 asks for: every pair of edges crosses (10 crossings).
	nodes := []dashboard.LayoutNode{{ID: "p0"}, {ID: "p1"}, {ID: "p2"}, {ID: "p3"}, {ID: "p4"}}
	for i := 4; i >= 0; i-- {
		nodes = append(nodes, dashboard.LayoutNode{ID: fmt.Sprintf("c%d", i), Deps: []string{fmt.Sprintf("p%d", i)}})
	}
	lay, err := dashboard.ComputeLayout(nodes)
	require.NoError(t, err)
	checkLayout(t, nodes, lay)
	require.Zero(t, lay.Crossings)
}

func TestLayoutRandomDAGs(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(8, 42))
	for round := range 200 {
		n := 1 + rng.IntN(30)
		nodes := make([]dashboard.LayoutNode, n)
		for i := range nodes {
			// Slugs of varied length, some longer than a node box shows.
			nodes[i].ID = fmt.Sprintf("s%d_%s", i, strings.Repeat("x", rng.IntN(40)))
			for j := 0; j < i; j++ {
				if rng.IntN(100) < 15 {
					nodes[i].Deps = append(nodes[i].Deps, nodes[j].ID)
				}
			}
		}
		lay, err := dashboard.ComputeLayout(nodes)
		require.NoError(t, err, "round %d", round)
		t.Run(fmt.Sprint(round), func(t *testing.T) { checkLayout(t, nodes, lay) })
	}
}

func TestLayoutEdgeCases(t *testing.T) {
	t.Parallel()
	lay, err := dashboard.ComputeLayout(nil)
	require.NoError(t, err)
	require.Empty(t, lay.Nodes)
	require.Positive(t, lay.Width)

	// A dependency named twice draws one edge.
	nodes := []dashboard.LayoutNode{{ID: "a"}, {ID: "b", Deps: []string{"a", "a"}}}
	lay, err = dashboard.ComputeLayout(nodes)
	require.NoError(t, err)
	checkLayout(t, nodes, lay)
	require.Len(t, lay.Edges, 1)

	_, err = dashboard.ComputeLayout([]dashboard.LayoutNode{{ID: "a", Deps: []string{"zz"}}})
	require.ErrorContains(t, err, `node "a" depends on unknown node "zz"`)
	_, err = dashboard.ComputeLayout([]dashboard.LayoutNode{{ID: "a", Deps: []string{"b"}}, {ID: "b"}})
	require.ErrorContains(t, err, `node "a" depends on "b", which is not listed before it`)
	_, err = dashboard.ComputeLayout([]dashboard.LayoutNode{{ID: "a"}, {ID: "a"}})
	require.ErrorContains(t, err, `node "a" appears twice`)
	_, err = dashboard.ComputeLayout([]dashboard.LayoutNode{{ID: "a", Deps: []string{"a"}}})
	require.ErrorContains(t, err, `node "a" depends on "a"`)
}

func TestShortLabel(t *testing.T) {
	t.Parallel()
	require.Equal(t, "short", dashboard.ShortLabel("short"))
	long := strings.Repeat("y", 60)
	got := dashboard.ShortLabel(long)
	require.Equal(t, dashboard.MaxLabelChars, len([]rune(got)))
	require.True(t, strings.HasSuffix(got, "…"))
}

func TestEdgePath(t *testing.T) {
	t.Parallel()
	require.Equal(t, "M10.0 0.0 L10.0 20.0", dashboard.EdgePath([]dashboard.Point{{10, 0}, {10, 20}}))
	require.Equal(t, "M0.0 0.0 C0.0 10.0 30.0 10.0 30.0 20.0", dashboard.EdgePath([]dashboard.Point{{0, 0}, {30, 20}}))
	require.Empty(t, dashboard.EdgePath(nil))
}
