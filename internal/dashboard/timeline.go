package dashboard

// The timeline of a run's steps on the run page.

import (
	"fmt"
	"math"
	"time"
)

type timelineBar struct {
	Slug, Status string
	Y            float64
	WaitX, WaitW float64 // created → started (or → skipped/failed when it never started)
	RunX, RunW   float64 // started → ended (or → now)
	Started      bool
	Label        string
	Title        string
	Tasks        []timelineTask // map steps: one thin bar per task (the first timelineTasks of them)
}

// timelineTask is one task of a map step on the timeline: from its start (or queueing) to its end (or now), with
// its retries.
type timelineTask struct {
	Step          string
	Index, Status string
	Y, X, W       float64
	Retries       int
	Title         string
}

type timelineTick struct {
	X     float64
	Label string
}

type timelineView struct {
	Width, Height float64
	LabelWidth    float64
	Bars          []timelineBar
	Ticks         []timelineTick
}

const (
	tlWidth      = 760.0
	tlLabelWidth = 170.0
	tlRow        = 26.0
	tlTop        = 22.0
	tlTaskRow    = 15.0
	// timelineTasks is how many tasks of one map step the timeline draws.
	timelineTasks = 20
)

// buildTimeline draws each step on a shared time axis from the run's start to its end (or now).
func buildTimeline(start, end time.Time, steps []stepView) timelineView {
	span := end.Sub(start)
	if span <= 0 {
		span = time.Millisecond
	}
	plot := tlWidth - tlLabelWidth - 60
	x := func(t time.Time) float64 {
		f := float64(t.Sub(start)) / float64(span)
		return tlLabelWidth + math.Max(0, math.Min(1, f))*plot
	}
	v := timelineView{Width: tlWidth, LabelWidth: tlLabelWidth}
	for i := 0; i <= 4; i++ {
		t := start.Add(span * time.Duration(i) / 4)
		v.Ticks = append(v.Ticks, timelineTick{X: x(t), Label: "+" + formatDur(t.Sub(start))})
	}
	y := tlTop
	for _, st := range steps {
		b := timelineBar{Slug: st.Slug, Status: st.Status, Y: y}
		y += tlRow
		stop := end
		if st.EndedAt != nil {
			stop = *st.EndedAt
		}
		if st.StartedAt != nil {
			b.Started = true
			b.WaitX, b.WaitW = x(st.CreatedAt), math.Max(0, x(*st.StartedAt)-x(st.CreatedAt))
			b.RunX, b.RunW = x(*st.StartedAt), math.Max(2, x(stop)-x(*st.StartedAt))
			b.Label = formatDur(stop.Sub(*st.StartedAt))
		} else if st.EndedAt != nil {
			b.WaitX, b.WaitW = x(st.CreatedAt), math.Max(0, x(stop)-x(st.CreatedAt))
			b.Label = st.Status
		} else {
			b.WaitX, b.WaitW = x(st.CreatedAt), math.Max(0, x(end)-x(st.CreatedAt))
			b.Label = "waiting"
		}
		b.Title = fmt.Sprintf("%s: %s", st.Slug, st.Status)
		if st.StartedAt != nil {
			b.Title += fmt.Sprintf(", started +%s", formatDur(st.StartedAt.Sub(start)))
		}
		if st.EndedAt != nil {
			b.Title += fmt.Sprintf(", ended +%s", formatDur(st.EndedAt.Sub(start)))
		}
		if st.Attempts > 0 {
			b.Title += fmt.Sprintf(", %d attempt(s)", st.Attempts)
		}
		if st.Retries > 0 {
			b.Label += fmt.Sprintf(" ↻%d", st.Retries)
			b.Title += fmt.Sprintf(", %d retr%s", st.Retries, map[bool]string{true: "y", false: "ies"}[st.Retries == 1])
		}
		if st.Type == "map" {
			for i, t := range st.Tasks {
				if i == timelineTasks {
					break
				}
				from := t.QueuedAt
				if t.StartedAt != nil {
					from = *t.StartedAt
				}
				to := end
				if t.EndedAt != nil {
					to = *t.EndedAt
				}
				tt := timelineTask{Step: st.Slug, Index: fmt.Sprint(t.TaskIndex), Status: t.Status, Y: y,
					X: x(from), W: math.Max(2, x(to)-x(from)), Retries: max(t.AttemptsCount-1, 0)}
				tt.Title = fmt.Sprintf("%s #%d: %s, %d attempt(s)", st.Slug, t.TaskIndex, t.Status, t.AttemptsCount)
				if t.StartedAt != nil {
					tt.Title += fmt.Sprintf(", started +%s", formatDur(t.StartedAt.Sub(start)))
				}
				if t.EndedAt != nil {
					tt.Title += fmt.Sprintf(", ended +%s", formatDur(t.EndedAt.Sub(start)))
				}
				b.Tasks = append(b.Tasks, tt)
				y += tlTaskRow
			}
		}
		v.Bars = append(v.Bars, b)
	}
	v.Height = y + 8
	return v
}
