// Command genmigration writes an unreleased migration file from sql/core. It refuses to overwrite a migration
// that is listed as released in schema/sql/migrations/RELEASED, so released migrations stay untouched.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

func main() {
	version := flag.String("version", "", "version of the migration, e.g. v0.16.0")
	seq := flag.Int("seq", 0, "sequence number of the migration")
	root := flag.String("root", "schema/sql", "path of the sql directory")
	flag.Parse()
	if err := run(*root, *version, *seq); err != nil {
		fmt.Fprintln(os.Stderr, "genmigration:", err)
		os.Exit(1)
	}
}

func run(root, version string, seq int) error {
	if version == "" || seq <= 0 {
		return fmt.Errorf("need -version and -seq")
	}
	name := fmt.Sprintf("%04d_%s.sql", seq, version)
	if released(root)[name] {
		return fmt.Errorf("%s is released (listed in %s) and must never be regenerated", name, filepath.Join(root, "migrations", "RELEASED"))
	}
	files, err := filepath.Glob(filepath.Join(root, "core", "*.sql"))
	if err != nil {
		return err
	}
	sort.Strings(files)
	var b strings.Builder
	fmt.Fprintf(&b, "-- pgflow-go schema %s, generated from schema/sql/core by `make schema`.\n", version)
	b.WriteString("set local check_function_bodies = off;\n\n")
	for _, f := range files {
		body, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		fmt.Fprintf(&b, "-- %s\n%s\n\n", filepath.Base(f), strings.TrimRight(string(body), "\n"))
	}
	out := filepath.Join(root, "migrations", name)
	if err := os.WriteFile(out, []byte(b.String()), 0o644); err != nil {
		return err
	}
	fmt.Println("wrote", out)
	return nil
}

func released(root string) map[string]bool {
	out := map[string]bool{}
	f, err := os.Open(filepath.Join(root, "migrations", "RELEASED"))
	if err != nil {
		return out
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		fields := strings.Fields(s.Text())
		if len(fields) == 0 {
			continue
		}
		line := fields[0]
		if !strings.HasPrefix(line, "#") {
			out[line] = true
		}
	}
	return out
}
