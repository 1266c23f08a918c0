package dashboard

import (
	"bytes"
	"encoding/json"
	"fmt"
	"html/template"
	"io"
	"math"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// pages holds one template set per page, each made of the shared layout and the page's own file.
type pages struct {
	byName map[string]*template.Template
}

var pageNames = []string{"flows", "flow", "runs", "run", "workers", "schedules", "error", "confirm"}

func loadPages() (*pages, error) {
	base, err := template.New("layout.html").Funcs(funcs).ParseFS(templateFS, "templates/layout.html")
	if err != nil {
		return nil, fmt.Errorf("dashboard: parse layout: %w", err)
	}
	p := &pages{byName: make(map[string]*template.Template)}
	for _, name := range pageNames {
		t, err := template.Must(base.Clone()).ParseFS(templateFS, "templates/"+name+".html")
		if err != nil {
			return nil, fmt.Errorf("dashboard: parse page %s: %w", name, err)
		}
		p.byName[name] = t
	}
	return p, nil
}

// render executes a page's "page" template (the whole document) or, for fragment requests, its "live"
// template (the part the script swaps in) into a buffer, so a failing template never sends half a page.
func (p *pages) render(w io.Writer, name string, fragment bool, data any) error {
	t, ok := p.byName[name]
	if !ok {
		return fmt.Errorf("dashboard: no page %q", name)
	}
	entry := "layout.html"
	if fragment && t.Lookup("live") != nil {
		entry = "live"
	}
	var buf bytes.Buffer
	if err := t.ExecuteTemplate(&buf, entry, data); err != nil {
		return fmt.Errorf("dashboard: render %s: %w", name, err)
	}
	_, err := buf.WriteTo(w)
	return err
}

var funcs = template.FuncMap{
	"ts":       formatTS,
	"tsp":      formatTSPtr,
	"clock":    formatClock,
	"addr":     func(t time.Time) *time.Time { return &t },
	"dur":      formatDur,
	"since":    func(from, to time.Time) string { return formatDur(to.Sub(from)) },
	"sincep":   func(from, to *time.Time) string { return formatDur(to.Sub(*from)) },
	"short":    shortID,
	"label":    ShortLabel,
	"px":       func(f float64) string { return strconv.FormatFloat(math.Round(f*10)/10, 'f', -1, 64) },
	"deref":    func(p *string) string { return derefStr(p) },
	"add":      func(a, b int) int { return a + b },
	"plural":   plural,
	"query":    queryString,
	"oneline":  oneLine,
	"hasValue": func(p *string) bool { return p != nil && *p != "" },
	"chars":    utf8.RuneCountInString,
	"addf":     func(a, b float64) float64 { return a + b },
	"ago":      formatAgo,
}

// formatAgo says how long before now t was: "12s ago", "3m05s ago"; "just now" under a second.
func formatAgo(t, now time.Time) string {
	d := now.Sub(t)
	if d < time.Second {
		return "just now"
	}
	return formatDur(d) + " ago"
}

func formatTS(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format("2006-01-02 15:04:05.000Z")
}

// formatClock prints the time of day only (UTC), for dense tables; pair it with formatTS in a title.
func formatClock(t *time.Time) string {
	if t == nil || t.IsZero() {
		return ""
	}
	return t.UTC().Format("15:04:05.000")
}

func formatTSPtr(t *time.Time) string {
	if t == nil {
		return ""
	}
	return formatTS(*t)
}

// formatDur prints a duration compactly: 850ms, 12.3s, 4m05s, 3h02m, 2d04h.
func formatDur(d time.Duration) string {
	if d < 0 {
		d = 0
	}
	switch {
	case d < time.Second:
		return fmt.Sprintf("%dms", d.Milliseconds())
	case d < time.Minute:
		return fmt.Sprintf("%.1fs", d.Seconds())
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
	default:
		return fmt.Sprintf("%dd%02dh", int(d.Hours())/24, int(d.Hours())%24)
	}
}

func shortID(id string) string {
	if len(id) > 8 {
		return id[:8]
	}
	return id
}

func derefStr(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

func plural(n int64, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return strconv.FormatInt(n, 10) + " " + many
}

// queryString builds "?k=v&…" from pairs, leaving out empty values.
func queryString(pairs ...string) string {
	q := url.Values{}
	for i := 0; i+1 < len(pairs); i += 2 {
		if pairs[i+1] != "" {
			q.Set(pairs[i], pairs[i+1])
		}
	}
	if len(q) == 0 {
		return ""
	}
	return "?" + q.Encode()
}

// oneLine shortens s to one line of at most n characters.
func oneLine(n int, s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}

// jsonView is a JSON document ready to show: pretty-printed and, when long, cut with a link to the whole text.
type jsonView struct {
	Present   bool // false: there is no document (SQL NULL)
	Text      string
	Truncated bool
	Chars     int    // length of the whole document's pretty text (or of the stored text when Truncated by SQL)
	Link      string // the whole document as JSON
}

// prettyJSON indents raw (compact text as PostgreSQL stores it) and cuts it at limit characters.
func prettyJSON(raw []byte, limit int, link string) jsonView {
	if raw == nil {
		return jsonView{}
	}
	v := jsonView{Present: true, Link: link}
	var buf bytes.Buffer
	text := string(raw)
	if err := json.Indent(&buf, raw, "", "  "); err == nil {
		text = buf.String()
	}
	v.Chars = utf8.RuneCountInString(text)
	if v.Chars > limit {
		v.Text = string([]rune(text)[:limit])
		v.Truncated = true
	} else {
		v.Text = text
	}
	return v
}
