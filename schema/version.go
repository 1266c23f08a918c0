package schema

// LatestVersion returns the version of the newest embedded migration, e.g. "v0.20.0": the schema version this
// binary installs with `pgflow migrate up`. It is "" only if the embedded migrations cannot be read, which the
// package's tests rule out for every build.
func LatestVersion() string {
	all, err := Migrations()
	if err != nil || len(all) == 0 {
		return ""
	}
	return all[len(all)-1].Version
}
