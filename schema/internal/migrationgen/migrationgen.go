// Package migrationgen writes the generated sections of an unreleased migration from the declarative schema
// (schema/sql/core), so a function change is made once, in core, and never pasted by hand.
//
// A migration marks each generated section with two lines:
//
//	-- generated from sql/core: 0100_function_complete_task.sql
//	...the file's text, rewritten by Generate...
//	-- end generated
//
// The special source "comments" stands for the `comment on function` statements of every function file of core
// that no other section of the same migration includes whole, so the guarantees the schema carries follow core.
package migrationgen

import (
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strings"
)

const (
	beginMarker    = "-- generated from sql/core: "
	endMarker      = "-- end generated"
	commentsSource = "comments"
	commentStart   = "comment on function "
)

// Generate returns migration with every generated section rewritten from the files of core (a directory of
// NNNN_*.sql files). It fails on a section without its end line, an unknown file, or a function file without a
// `comment on function` statement.
func Generate(migration string, core fs.FS) (string, error) {
	lines := strings.SplitAfter(migration, "\n")
	type section struct {
		source     string
		begin, end int // line indexes of the markers
	}
	var sections []section
	included := map[string]bool{}
	for i := 0; i < len(lines); i++ {
		src, ok := strings.CutPrefix(strings.TrimRight(lines[i], "\n"), beginMarker)
		if !ok {
			continue
		}
		src = strings.TrimSpace(src)
		end := -1
		for j := i + 1; j < len(lines); j++ {
			if strings.TrimRight(lines[j], "\n") == endMarker {
				end = j
				break
			}
		}
		if end < 0 {
			return "", fmt.Errorf("migrationgen: section %q at line %d has no %q line", src, i+1, endMarker)
		}
		sections = append(sections, section{source: src, begin: i, end: end})
		if src != commentsSource {
			included[src] = true
		}
		i = end
	}

	var out strings.Builder
	next := 0
	for _, s := range sections {
		for _, l := range lines[next : s.begin+1] {
			out.WriteString(l)
		}
		body, err := sectionBody(s.source, core, included)
		if err != nil {
			return "", err
		}
		out.WriteString(body)
		out.WriteString(lines[s.end])
		next = s.end + 1
	}
	for _, l := range lines[next:] {
		out.WriteString(l)
	}
	return out.String(), nil
}

func sectionBody(source string, core fs.FS, included map[string]bool) (string, error) {
	if source != commentsSource {
		b, err := fs.ReadFile(core, source)
		if err != nil {
			return "", fmt.Errorf("migrationgen: section %q: %w", source, err)
		}
		return strings.TrimRight(string(b), "\n") + "\n", nil
	}
	names, err := fs.Glob(core, "*_function_*.sql")
	if err != nil {
		return "", fmt.Errorf("migrationgen: list core functions: %w", err)
	}
	sort.Strings(names)
	var out strings.Builder
	for _, name := range names {
		if included[name] {
			continue
		}
		b, err := fs.ReadFile(core, name)
		if err != nil {
			return "", fmt.Errorf("migrationgen: %w", err)
		}
		text := string(b)
		at := strings.Index(text, commentStart)
		if at < 0 {
			return "", fmt.Errorf("migrationgen: %s has no %q statement: every function carries its guarantee as a comment",
				path.Join("sql/core", name), strings.TrimSpace(commentStart))
		}
		out.WriteString(strings.TrimRight(text[at:], "\n") + "\n")
	}
	return out.String(), nil
}
