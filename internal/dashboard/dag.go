package dashboard

// The DAG drawing of a flow's steps, on the flow page and the run page.

import (
	"sort"

	"github.com/pgflow-go/pgflow/internal/sqlapi"
)

type dagNode struct {
	Slug, Label, Type, Status string
	Href                      string
	X, Y, W, H                float64
	TX, TY                    float64 // label anchor
	Title                     string
	Counts                    string // run page, map steps: the task counts shown under the label
}

type dagEdge struct {
	From, To, D string
	Status      string // the status of the dependency: an edge lights up when its source completes
}

type dagView struct {
	Width, Height float64
	Nodes         []dagNode
	Edges         []dagEdge
}

// buildDAG lays out the steps. status (optional) colours nodes by step status; hrefPrefix+slug is each node's
// link ("" for no links).
func buildDAG(steps []sqlapi.StepDefinition, status map[string]string, hrefPrefix string) (dagView, error) {
	in := make([]LayoutNode, len(steps))
	// step_index is a topological order; sort defensively in case the caller did not.
	sorted := append([]sqlapi.StepDefinition(nil), steps...)
	sort.SliceStable(sorted, func(a, b int) bool { return sorted[a].StepIndex < sorted[b].StepIndex })
	for i, st := range sorted {
		in[i] = LayoutNode{ID: st.StepSlug, Deps: st.Deps}
	}
	lay, err := ComputeLayout(in)
	if err != nil {
		return dagView{}, err
	}
	v := dagView{Width: lay.Width, Height: lay.Height}
	for i, n := range lay.Nodes {
		st := sorted[i]
		node := dagNode{
			Slug: n.ID, Label: ShortLabel(n.ID), Type: st.StepType, Status: "none",
			X: n.X, Y: n.Y, W: n.W, H: n.H, TX: n.X + n.W/2, TY: n.Y + n.H/2,
		}
		title := n.ID + " (" + st.StepType + ")"
		if status != nil {
			if s, ok := status[n.ID]; ok {
				node.Status = s
				title += ": " + s
			}
		}
		if hrefPrefix != "" {
			node.Href = hrefPrefix + n.ID
		}
		node.Title = title
		v.Nodes = append(v.Nodes, node)
	}
	for _, e := range lay.Edges {
		de := dagEdge{From: e.From, To: e.To, D: EdgePath(e.Points), Status: "none"}
		if status != nil {
			if s, ok := status[e.From]; ok {
				de.Status = s
			}
		}
		v.Edges = append(v.Edges, de)
	}
	return v, nil
}
