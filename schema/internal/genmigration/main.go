// Command genmigration rewrites the generated sections of every unreleased migration (a file of
// schema/sql/migrations not listed in RELEASED) from schema/sql/core. Run it with `go generate ./schema`.
package main

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/pgflow-go/pgflow/schema/internal/migrationgen"
)

func main() {
	if err := run("sql"); err != nil {
		fmt.Fprintln(os.Stderr, "genmigration:", err)
		os.Exit(1)
	}
}

func run(sqlDir string) error {
	migrations := filepath.Join(sqlDir, "migrations")
	released, err := releasedFiles(filepath.Join(migrations, "RELEASED"))
	if err != nil {
		return err
	}
	files, err := filepath.Glob(filepath.Join(migrations, "*.sql"))
	if err != nil {
		return err
	}
	core := os.DirFS(filepath.Join(sqlDir, "core"))
	for _, f := range files {
		if released[filepath.Base(f)] {
			continue
		}
		old, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		gen, err := migrationgen.Generate(string(old), core)
		if err != nil {
			return fmt.Errorf("%s: %w", f, err)
		}
		if gen == string(old) {
			continue
		}
		if err := os.WriteFile(f, []byte(gen), 0o644); err != nil {
			return err
		}
		fmt.Println("genmigration: rewrote", f)
	}
	return nil
}

// releasedFiles reads RELEASED: "FILE SHA256" lines, # comments.
func releasedFiles(name string) (map[string]bool, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[string]bool{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		out[strings.Fields(line)[0]] = true
	}
	return out, sc.Err()
}
