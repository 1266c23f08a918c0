package main

// How the commands render values as text: durations, timestamps, table cells, JSON documents, plurals.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// formatDuration renders d briefly: 850ms, 1.25s, 2m05s, 3h04m, 2d05h.
func formatDuration(d time.Duration) string {
	if d < 0 {
		d = 0
	}
	switch {
	case d < time.Second:
		return fmt.Sprintf("%dms", d.Milliseconds())
	case d < time.Minute:
		return strconv.FormatFloat(d.Seconds(), 'f', 2, 64) + "s"
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
	default:
		return fmt.Sprintf("%dd%02dh", int(d.Hours())/24, int(d.Hours())%24)
	}
}

func formatTime(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05Z") }

// oneLine makes s fit one table cell: whitespace runs become one space and it is cut to max runes with "…".
func oneLine(s string, max int) string {
	s = strings.Join(strings.Fields(s), " ")
	if utf8.RuneCountInString(s) <= max {
		return s
	}
	r := []rune(s)
	return string(r[:max-1]) + "…"
}

// compactJSON returns raw without insignificant whitespace ("null" for nil).
func compactJSON(raw json.RawMessage) string {
	if len(raw) == 0 {
		return "null"
	}
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		return string(raw)
	}
	return b.String()
}

// indentJSON returns raw indented by two spaces ("null" for nil).
func indentJSON(raw json.RawMessage) string {
	if len(raw) == 0 {
		return "null"
	}
	var b bytes.Buffer
	if err := json.Indent(&b, raw, "", "  "); err != nil {
		return string(raw)
	}
	return b.String()
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// strPtr is s, or nil for "" (a JSON null).
func strPtr(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// nonEmpty is p, or nil when p points to "" (a JSON null).
func nonEmpty(p *string) *string {
	if p == nil || *p == "" {
		return nil
	}
	return p
}
