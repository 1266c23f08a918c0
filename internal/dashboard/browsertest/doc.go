// Package browsertest holds the dashboard's browser tests: they drive internal/dashboard in a real headless
// Chromium through chromedp. It is a module of its own (see go.mod) so that chromedp stays out of the library's
// module: a user of github.com/pgflow-go/pgflow never downloads it. The package has no code besides its tests;
// `make test` runs them with every other module's tests.
package browsertest
