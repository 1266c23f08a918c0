// Package doccheck checks that every Go snippet of the README and docs/ compiles against the current code, so a
// renamed function or changed signature cannot leave the documentation behind.
//
// # The convention
//
// Every ```go block of README.md and docs/*.md is type-checked (go/types; only "declared and not used" and
// "imported and not used" are tolerated, as fragments cause them legitimately). What a snippet may use:
//
//   - The package names of knownImports, without importing them: a snippet's own import block is kept, the
//     imports of the other names it uses are added. A snippet with a package clause is a whole file and is
//     used as it is.
//   - ctx, pool, client and err, the variables every application has (preamble).
//   - The page's prelude (pagePreludes): Go declarations of the names its prose assumes — the page's flow, its
//     input type, a transaction, a run id, the application's own helpers. Keep them few and plausible; a name
//     a reader cannot guess from the page belongs in the snippet instead.
//   - The top-level declarations (func, type, whole files) of the snippets above it on the same page: a page
//     reads top to bottom, so a tutorial can define its flow once and use it in later snippets. All snippets
//     of a page are one package (the package clause of its first whole-file snippet, if any).
//
// A fragment's top-level lines (from `func ` or `type ` at column 0 to the next unindented line) stay top
// level; the other lines become the body of a func returning error, so `return err` reads as in an
// application and `...` must be written as a comment (`// ...`). Two alternatives that declare the same
// variable are written with `=` for the second, or as separate blocks.
//
// Imports are resolved from compiled export data (`go list -export`), run in the module that owns the
// snippet's nested-module imports (pgflowprom, pgflowotel with Prometheus and OpenTelemetry), so the check
// works in the workspace (go.work) and with GOWORK=off alike. A failure names the page and line of the
// snippet (//line directives).
package doccheck

import (
	"bytes"
	"errors"
	"fmt"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// repoRoot is the repository root, relative to this package's directory (the test's working directory).
const repoRoot = "../.."

// knownImports maps a package name used in snippets to its import path; a fragment gets the imports of the
// names it uses.
var knownImports = map[string]string{
	"pgflow":     "github.com/pgflow-go/pgflow",
	"pgflowtest": "github.com/pgflow-go/pgflow/pgflowtest",
	"schema":     "github.com/pgflow-go/pgflow/schema",
	"pgx":        "github.com/jackc/pgx/v5",
	"pgxpool":    "github.com/jackc/pgx/v5/pgxpool",
	"context":    "context",
	"json":       "encoding/json",
	"errors":     "errors",
	"fmt":        "fmt",
	"log":        "log",
	"slog":       "log/slog",
	"os":         "os",
	"signal":     "os/signal",
	"syscall":    "syscall",
	"strings":    "strings",
	"time":       "time",
	"http":       "net/http",
	"testing":    "testing",
	"pgflowprom": "github.com/pgflow-go/pgflow/pgflowprom",
	"pgflowotel": "github.com/pgflow-go/pgflow/pgflowotel",
	"prometheus": "github.com/prometheus/client_golang/prometheus",
	"promhttp":   "github.com/prometheus/client_golang/prometheus/promhttp",
	"otel":       "go.opentelemetry.io/otel",
	"dashboard":  "github.com/pgflow-go/pgflow/internal/dashboard",
}

// nestedModules maps import path prefixes to the directory of the nested module that resolves them when the
// workspace is off; everything else resolves in the root module.
var nestedModules = []struct{ prefix, dir string }{
	{"github.com/pgflow-go/pgflow/pgflowprom", "pgflowprom"},
	{"github.com/prometheus/", "pgflowprom"},
	{"github.com/pgflow-go/pgflow/pgflowotel", "pgflowotel"},
	{"go.opentelemetry.io/", "pgflowotel"},
}

// preamble declares what snippets of every page may use without declaring it: the usual variables of an
// application.
const preamble = `
var (
	ctx    context.Context
	pool   *pgxpool.Pool
	client *pgflow.Client
	err    error
)
`

// pagePreludes declares, per page (path from the repository root), the names its snippets take from the prose:
// the page's flow, its types, the application's helpers. Function declarations need no body here.
var pagePreludes = map[string]string{
	"README.md": `
type Order struct {
	ID    int
	Email string
}
type Receipt struct {
	ID    string
	Email string
}

func chargeCard(ctx context.Context, o Order) (Receipt, error)
func sendReceipt(ctx context.Context, r Receipt) error
`,
	"docs/client.md": `
type SignupInput struct {
	Email string ` + "`json:\"email\"`" + `
}
type Account struct{ ID int64 }

var (
	signupFlow *pgflow.Flow[SignupInput] // the page's flow, slug "signup"
	acctStep   pgflow.StepHandle[Account] // one of its steps
	flow       = signupFlow
	input      SignupInput
	inputs     []SignupInput
	raw        json.RawMessage
	raws       []json.RawMessage
	runIDs     []string
	requestID  string // a UUID chosen by the caller
	tx         pgx.Tx
	run        *pgflow.Run
	runID      string
)
`,
	"docs/concepts.md": `
type OrderInput struct{ OrderID int64 }
type Order struct {
	ID    int64
	Items []string
}
type Receipt struct{ ID string }
type Shipment struct{ Tracking string }
type Thumb struct{ URL string }
type In struct{ Source string }
type Row struct{ ID int }

var (
	f      *pgflow.Flow[OrderInput]   // the page's flow, "process_order"
	charge pgflow.StepHandle[Receipt] // one of its steps
	g      *pgflow.Flow[In]           // another flow
)

func loadOrder(ctx context.Context, id int64) (Order, error)
func shipHandler(ctx context.Context, t *pgflow.Task[OrderInput]) (Shipment, error)
func makeThumb(ctx context.Context, url string) (Thumb, error)
func listIDs(ctx context.Context, source string) ([]int, error)
func loadRow(ctx context.Context, id int) (Row, error)
`,
	"docs/queues.md": `
type Order struct{ ID int }

var flow *pgflow.Flow[Order] // the page's flow, defined with QueuePerStep
`,
	"docs/worker.md": `
type Order struct{ ID int }
type Report struct{ Month string }

var (
	ordersFlow  *pgflow.Flow[Order]
	reportsFlow *pgflow.Flow[Report]
	worker      *pgflow.Worker
)
`,
	"docs/observability.md": `
type Order struct{ ID int }

var ordersFlow *pgflow.Flow[Order]
`,
	"docs/dashboard.md": `
var mux *http.ServeMux
`,
}

// ignored are type-checker complaints that fragments legitimately cause.
var ignored = regexp.MustCompile(`declared and not used|imported and not used|"[^"]+" imported as \w+ and not used`)

var goBlock = regexp.MustCompile("(?s)```go\n(.*?)```")

type snippet struct {
	page string // path from the repository root
	line int    // line of the first line of code
	code string
}

// docPages are the paths of every page of docs/ and of the README.
func docPages(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(repoRoot, "docs", "*.md"))
	require.NoError(t, err)
	return append(files, filepath.Join(repoRoot, "README.md"))
}

// pages returns the Go snippets of README.md and docs/*.md by page, in page order.
func pages(t *testing.T) (names []string, byPage map[string][]snippet) {
	t.Helper()
	byPage = map[string][]snippet{}
	for _, f := range docPages(t) {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		page, err := filepath.Rel(repoRoot, f)
		require.NoError(t, err)
		page = filepath.ToSlash(page)
		for _, m := range goBlock.FindAllSubmatchIndex(b, -1) {
			line := 2 + strings.Count(string(b[:m[0]]), "\n")
			byPage[page] = append(byPage[page], snippet{page: page, line: line, code: string(b[m[2]:m[3]])})
		}
		if len(byPage[page]) > 0 {
			names = append(names, page)
		}
	}
	for page := range pagePreludes {
		require.Contains(t, byPage, page, "pagePreludes names a page without Go snippets")
	}
	sort.Strings(names)
	require.NotEmpty(t, names)
	return names, byPage
}

var packageClause = regexp.MustCompile(`(?m)^package (\w+)\s*$`)

// wholeFile reports the package name of a snippet that is a whole file (starts with a package clause).
func wholeFile(code string) (string, bool) {
	if !strings.HasPrefix(strings.TrimSpace(code), "package ") {
		return "", false
	}
	m := packageClause.FindStringSubmatch(code)
	if m == nil {
		return "", false
	}
	return m[1], true
}

// segment accumulates lines for one part of a generated file, with //line directives that keep positions
// pointing at the page.
type segment struct {
	page  string
	lines []string
	next  int // page line the next appended line continues; 0 before the first
}

func (s *segment) add(line int, text string) {
	if line != s.next {
		s.lines = append(s.lines, fmt.Sprintf("//line %s:%d:1", s.page, line))
	}
	s.lines = append(s.lines, text)
	s.next = line + 1
}

func (s *segment) String() string { return strings.Join(s.lines, "\n") }

// importName is the name an import spec (`"path"` or `name "path"`) binds.
func importName(spec string) string {
	spec = strings.TrimSpace(spec)
	if name, _, ok := strings.Cut(spec, " "); ok && !strings.HasPrefix(spec, `"`) {
		return name
	}
	path, err := strconv.Unquote(spec)
	if err != nil {
		return ""
	}
	for name, p := range knownImports {
		if p == path {
			return name
		}
	}
	parts := strings.Split(path, "/")
	last := parts[len(parts)-1]
	if regexp.MustCompile(`^v[0-9]+$`).MatchString(last) && len(parts) > 1 {
		last = parts[len(parts)-2]
	}
	return last
}

func importPath(spec string) string {
	spec = strings.TrimSpace(spec)
	if i := strings.Index(spec, `"`); i >= 0 {
		if p, err := strconv.Unquote(spec[i:]); err == nil {
			return p
		}
	}
	return ""
}

// uses reports whether code refers to package name (name.Something).
func uses(code, name string) bool {
	return regexp.MustCompile(`\b` + regexp.QuoteMeta(name) + `\.`).MatchString(code)
}

// importBlock returns the import declaration for code: the explicit specs, plus the known imports of the
// package names code uses; with only set, only the imports whose names code uses.
func importBlock(code string, explicit []string, onlyUsed bool) string {
	var specs []string
	have := map[string]bool{}
	for _, e := range explicit {
		have[importPath(e)] = true
		if !onlyUsed || uses(code, importName(e)) {
			specs = append(specs, strings.TrimSpace(e))
		}
	}
	for name, path := range knownImports {
		if !have[path] && uses(code, name) {
			specs = append(specs, fmt.Sprintf("%s %q", name, path))
		}
	}
	if len(specs) == 0 {
		return ""
	}
	sort.Strings(specs)
	return "import (\n\t" + strings.Join(specs, "\n\t") + "\n)\n"
}

// fragment is a snippet without a package clause, split into its imports, its top-level declarations and the
// statements that become a function body.
type fragment struct {
	explicit  []string
	top, body segment
}

func split(s snippet) fragment {
	fr := fragment{top: segment{page: s.page}, body: segment{page: s.page}}
	inTop, inImport := false, false
	for i, l := range strings.Split(strings.TrimSuffix(s.code, "\n"), "\n") {
		line := s.line + i
		switch {
		case inImport:
			if strings.TrimSpace(l) == ")" {
				inImport = false
			} else if strings.TrimSpace(l) != "" {
				fr.explicit = append(fr.explicit, strings.TrimSpace(l))
			}
			continue
		case strings.HasPrefix(l, "import ("):
			inImport = true
			continue
		case strings.HasPrefix(l, "import "):
			fr.explicit = append(fr.explicit, strings.TrimPrefix(l, "import "))
			continue
		case strings.HasPrefix(l, "func ") || strings.HasPrefix(l, "type "):
			inTop = true
		case inTop && l != "" && !strings.HasPrefix(l, "\t") && !strings.HasPrefix(l, " ") &&
			!strings.HasPrefix(l, "}") && !strings.HasPrefix(l, ")") && !strings.HasPrefix(l, "//"):
			inTop = false
		}
		if inTop {
			fr.top.add(line, l)
		} else {
			fr.body.add(line, l)
		}
	}
	return fr
}

// unit is one type-check: the snippet under test in its page's package.
type unit struct {
	s       snippet
	pkg     string
	files   []string // generated sources; the last one is the snippet's
	imports []string // import paths of all files
	dir     string   // module directory that resolves the imports
}

// source is the file of the snippet under test.
func source(pkg string, s snippet) string {
	if _, ok := wholeFile(s.code); ok {
		return fmt.Sprintf("//line %s:%d:1\n%s", s.page, s.line, s.code)
	}
	fr := split(s)
	return "package " + pkg + "\n\n" + importBlock(s.code, fr.explicit, false) + "\n" + fr.top.String() +
		"\n\nfunc _() error {\n" + fr.body.String() + "\n\treturn nil\n}\n"
}

// declarations is what a snippet leaves to the snippets below it on its page: a whole file, or a fragment's
// top-level declarations ("" if it has none).
func declarations(pkg string, s snippet) string {
	if _, ok := wholeFile(s.code); ok {
		return fmt.Sprintf("//line %s:%d:1\n%s", s.page, s.line, s.code)
	}
	fr := split(s)
	top := fr.top.String()
	if strings.TrimSpace(top) == "" {
		return ""
	}
	return "package " + pkg + "\n\n" + importBlock(top, fr.explicit, true) + "\n" + top + "\n"
}

func prelude(pkg, page string) string {
	decls := preamble + pagePreludes[page]
	return "package " + pkg + "\n\n" + importBlock(decls, nil, false) + "\n" +
		"//line prelude(" + page + "):1:1\n" + decls
}

// units builds one type-check per snippet.
func units(t *testing.T) []unit {
	names, byPage := pages(t)
	var out []unit
	for _, page := range names {
		snips := byPage[page]
		pkg := "snippet"
		for _, s := range snips {
			if name, ok := wholeFile(s.code); ok {
				pkg = name
				break
			}
		}
		above := []string{prelude(pkg, page)}
		for _, s := range snips {
			if name, ok := wholeFile(s.code); ok && name != pkg {
				t.Errorf("%s:%d: package %s, but the page's snippets are package %s", s.page, s.line, name, pkg)
			}
			u := unit{s: s, pkg: pkg, files: append(slices.Clone(above), source(pkg, s))}
			u.imports, u.dir = resolveDir(t, page, u.files)
			out = append(out, u)
			if d := declarations(pkg, s); d != "" {
				above = append(above, d)
			}
		}
	}
	return out
}

// resolveDir lists the import paths of files and picks the module directory that resolves them.
func resolveDir(t *testing.T, page string, files []string) ([]string, string) {
	seen := map[string]bool{}
	var paths []string
	dir := "."
	for _, src := range files {
		f, err := parser.ParseFile(token.NewFileSet(), "", src, parser.ImportsOnly)
		if err != nil {
			continue // reported by the type-check
		}
		for _, spec := range f.Imports {
			p, _ := strconv.Unquote(spec.Path.Value)
			if seen[p] {
				continue
			}
			seen[p] = true
			paths = append(paths, p)
			for _, m := range nestedModules {
				if strings.HasPrefix(p, m.prefix) {
					if dir != "." && dir != m.dir {
						t.Errorf("%s: a snippet and the declarations above it import from modules %s and %s, which "+
							"no single module resolves without go.work: move the declarations into a function body", page, dir, m.dir)
					}
					dir = m.dir
				}
			}
		}
	}
	return paths, dir
}

// exportImporter resolves imports from the export data `go list -export` compiles, run in a module directory.
type exportImporter struct {
	exports map[string]string
}

func newExportImporter(t *testing.T, dir string, paths []string) exportImporter {
	t.Helper()
	args := append([]string{"list", "-e", "-export", "-f", "{{.ImportPath}}\t{{.Export}}\t{{with .Error}}{{.Err}}{{end}}", "--"}, paths...)
	cmd := exec.Command("go", args...)
	cmd.Dir = filepath.Join(repoRoot, dir)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "go list in %s: %s", dir, stderr.String())
	imp := exportImporter{exports: map[string]string{}}
	for _, l := range strings.Split(strings.TrimRight(string(out), "\n"), "\n") {
		parts := strings.SplitN(l, "\t", 3)
		require.Len(t, parts, 3, "go list output %q", l)
		if parts[2] != "" {
			t.Errorf("import %s does not resolve in %s: %s", parts[0], dir, parts[2])
			continue
		}
		imp.exports[parts[0]] = parts[1]
	}
	return imp
}

func (e exportImporter) lookup(path string) (io.ReadCloser, error) {
	f, ok := e.exports[path]
	if !ok || f == "" {
		return nil, errors.New("no export data for " + path)
	}
	return os.Open(f)
}

func TestDocSnippetsCompile(t *testing.T) {
	all := units(t)
	byDir := map[string][]string{}
	for _, u := range all {
		for _, p := range u.imports {
			if !slices.Contains(byDir[u.dir], p) {
				byDir[u.dir] = append(byDir[u.dir], p)
			}
		}
	}
	importers := map[string]exportImporter{}
	for dir, paths := range byDir {
		importers[dir] = newExportImporter(t, dir, paths)
	}
	for _, u := range all {
		t.Run(fmt.Sprintf("%s:%d", u.s.page, u.s.line), func(t *testing.T) {
			if problems := check(u, importers[u.dir]); len(problems) > 0 {
				t.Errorf("the snippet at %s:%d does not compile:\n  %s\n\nas checked:\n%s", u.s.page, u.s.line,
					strings.Join(problems, "\n  "), numbered(u.files[len(u.files)-1]))
			}
		})
	}
}

// check type-checks u and returns the problems of its own file and of the page's prelude (the snippets above
// it report their own).
func check(u unit, imp exportImporter) []string {
	fset := token.NewFileSet()
	var files []*ast.File
	var problems []string
	for i, src := range u.files {
		f, err := parser.ParseFile(fset, fmt.Sprintf("file%d.go", i), src, parser.ParseComments|parser.SkipObjectResolution)
		if err != nil {
			if i == 0 || i == len(u.files)-1 {
				problems = append(problems, "does not parse: "+err.Error())
			}
			continue
		}
		files = append(files, f)
	}
	if len(problems) > 0 {
		return problems
	}
	own := map[*token.File]bool{
		fset.File(files[0].Pos()):            true,
		fset.File(files[len(files)-1].Pos()): true,
	}
	conf := types.Config{
		Importer: importer.ForCompiler(fset, "gc", imp.lookup),
		Error: func(err error) {
			var te types.Error
			if errors.As(err, &te) && !own[te.Fset.File(te.Pos)] {
				return
			}
			if !ignored.MatchString(err.Error()) {
				problems = append(problems, err.Error())
			}
		},
	}
	_, _ = conf.Check(u.pkg, fset, files, nil)
	return problems
}

func numbered(src string) string {
	var b strings.Builder
	for i, l := range strings.Split(src, "\n") {
		fmt.Fprintf(&b, "%4d  %s\n", i+1, l)
	}
	return b.String()
}
