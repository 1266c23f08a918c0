package doccheck

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode"

	"github.com/stretchr/testify/require"
)

var (
	fencedBlock = regexp.MustCompile("(?ms)^```.*?\n```")
	codeSpan    = regexp.MustCompile("`[^`\n]*`")
	heading     = regexp.MustCompile(`(?m)^#{1,6}[ \t]+(.+?)[ \t]*#*[ \t]*$`)
	inlineLink  = regexp.MustCompile(`\[([^\]]*)\]\(([^)\s]+)\)`)
)

// prose is a page without its fenced blocks and code spans, where "](" is not a link.
func prose(page string) string {
	return codeSpan.ReplaceAllString(fencedBlock.ReplaceAllString(page, ""), "")
}

// anchorsOf gives the anchors GitHub makes for a page's headings: the heading's text (links reduced to their
// text, code spans to their content) in lower case, without the characters that are neither letters, digits,
// spaces, hyphens nor underscores, spaces replaced by hyphens; a repeated anchor gets -1, -2, ...
func anchorsOf(page string) map[string]bool {
	anchors := map[string]bool{}
	seen := map[string]int{}
	for _, m := range heading.FindAllStringSubmatch(fencedBlock.ReplaceAllString(page, ""), -1) {
		text := inlineLink.ReplaceAllString(m[1], "$1")
		text = strings.ReplaceAll(text, "`", "")
		var b strings.Builder
		for _, r := range strings.ToLower(text) {
			switch {
			case r == ' ':
				b.WriteRune('-')
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
				b.WriteRune(r)
			}
		}
		anchor := b.String()
		if n, ok := seen[anchor]; ok {
			seen[anchor] = n + 1
			anchor += "-" + strconv.Itoa(n+1)
		} else {
			seen[anchor] = 0
		}
		anchors[anchor] = true
	}
	return anchors
}

// TestDocLinksResolve checks every relative link of the README, the changelog and docs/: the file exists and,
// for a link to a heading of a Markdown page, the page has that heading. A renamed heading or page cannot leave a
// dangling link behind.
func TestDocLinksResolve(t *testing.T) {
	anchors := map[string]map[string]bool{}
	pageAnchors := func(path string) map[string]bool {
		if a, ok := anchors[path]; ok {
			return a
		}
		src, err := os.ReadFile(path)
		require.NoError(t, err)
		anchors[path] = anchorsOf(string(src))
		return anchors[path]
	}
	checked := 0
	for _, page := range append(docPages(t), filepath.Join(repoRoot, "CHANGELOG.md")) {
		src, err := os.ReadFile(page)
		require.NoError(t, err)
		name, _ := filepath.Rel(repoRoot, page)
		for _, m := range inlineLink.FindAllStringSubmatch(prose(string(src)), -1) {
			link := m[2]
			if strings.Contains(link, "://") || strings.HasPrefix(link, "mailto:") {
				continue
			}
			path, anchor, _ := strings.Cut(link, "#")
			target := page
			if path != "" {
				target = filepath.Join(filepath.Dir(page), path)
			}
			if _, err := os.Stat(target); err != nil {
				t.Errorf("%s: link %q: %s does not exist", name, link, path)
				continue
			}
			checked++
			if anchor == "" || !strings.HasSuffix(target, ".md") {
				continue
			}
			if !pageAnchors(target)[anchor] {
				targetName, _ := filepath.Rel(repoRoot, target)
				t.Errorf("%s: link %q: %s has no heading with anchor #%s", name, link, targetName, anchor)
			}
		}
	}
	if checked < 100 {
		t.Fatalf("only %d relative links found; the pattern no longer matches the pages", checked)
	}
}

// TestAnchorsOf pins the anchor rules on headings the pages use.
func TestAnchorsOf(t *testing.T) {
	page := "# Performance\n" +
		"## Fifteenth round (v0.20.0): one result call in flight per worker\n" +
		"#### `pgflow._notify(channels text[], payloads text[]) → void`\n" +
		"### [Behind PgBouncer](deploy.md)\n" +
		"```\n# not a heading\n```\n" +
		"### Results\n### Results\n"
	got := anchorsOf(page)
	for _, want := range []string{
		"performance",
		"fifteenth-round-v0200-one-result-call-in-flight-per-worker",
		"pgflow_notifychannels-text-payloads-text--void",
		"behind-pgbouncer",
		"results", "results-1",
	} {
		if !got[want] {
			t.Errorf("no anchor %q in %v", want, got)
		}
	}
	if got["not-a-heading"] {
		t.Errorf("a line of a fenced block became an anchor: %v", got)
	}
}
