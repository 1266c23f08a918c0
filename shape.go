package pgflow

import (
	"bytes"
	"encoding/json"
	"slices"
)

// Shape returns the flow's shape: the JSON document a worker passes to pgflow.ensure_flow_compiled. Without its
// "options" keys it is equal (as jsonb) to what pgflow._get_flow_shape returns for the same flow once it is in
// the database; the options are used only when the database creates the flow and are never compared:
//
//	{"steps":[{"slug":"fetch","stepType":"single","dependencies":[],"whenUnmet":"skip","whenExhausted":"fail",
//	  "requiredInputPattern":{"defined":false},"forbiddenInputPattern":{"defined":false},
//	  "options":{"maxAttempts":5}}],
//	 "options":{"maxAttempts":3,"baseDelay":1,"timeout":30}}
//
// Steps are in definition order, dependencies sorted, whenUnmet/whenExhausted default to "skip"/"fail", a pattern
// is {"defined":true,"value":<canonical JSON>} when set; "options" objects appear only when an option is set and
// hold only the options that are set (seconds for durations). The encoding is compact and deterministic.
//
// Shape freezes the flow and fails with the recorded definition errors if there are any.
func (f *Flow[I]) Shape() (json.RawMessage, error) {
	steps, err := f.c.freeze()
	if err != nil {
		return nil, err
	}
	return shapeJSON(&f.c.opts, steps)
}

type flowShape struct {
	Steps   []stepShape   `json:"steps"`
	Options *shapeOptions `json:"options,omitempty"`
}

type stepShape struct {
	Slug                  string        `json:"slug"`
	StepType              string        `json:"stepType"`
	Dependencies          []string      `json:"dependencies"`
	WhenUnmet             WhenMode      `json:"whenUnmet"`
	WhenExhausted         WhenMode      `json:"whenExhausted"`
	RequiredInputPattern  patternShape  `json:"requiredInputPattern"`
	ForbiddenInputPattern patternShape  `json:"forbiddenInputPattern"`
	Options               *shapeOptions `json:"options,omitempty"`
}

type patternShape struct {
	Defined bool            `json:"defined"`
	Value   json.RawMessage `json:"value,omitempty"`
}

type shapeOptions struct {
	MaxAttempts *int `json:"maxAttempts,omitempty"`
	BaseDelay   *int `json:"baseDelay,omitempty"`
	Timeout     *int `json:"timeout,omitempty"`
	StartDelay  *int `json:"startDelay,omitempty"`
}

func shapeJSON(flowOpts *optionValues, steps []*stepDef) (json.RawMessage, error) {
	doc := flowShape{Steps: make([]stepShape, 0, len(steps)), Options: shapeOpts(flowOpts)}
	for _, d := range steps {
		deps := d.depSlugs()
		slices.Sort(deps)
		doc.Steps = append(doc.Steps, stepShape{
			Slug:                  d.slug,
			StepType:              d.stepType,
			Dependencies:          deps,
			WhenUnmet:             modeOr(d.opts.whenUnmet, Skip),
			WhenExhausted:         modeOr(d.opts.whenExhausted, Fail),
			RequiredInputPattern:  patternShape{Defined: d.opts.ifPattern != nil, Value: d.opts.ifPattern},
			ForbiddenInputPattern: patternShape{Defined: d.opts.ifNotPattern != nil, Value: d.opts.ifNotPattern},
			Options:               shapeOpts(&d.opts),
		})
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(doc); err != nil {
		return nil, err
	}
	return json.RawMessage(bytes.TrimSuffix(buf.Bytes(), []byte("\n"))), nil
}

func shapeOpts(v *optionValues) *shapeOptions {
	if v.maxAttempts == nil && v.baseDelay == nil && v.timeout == nil && v.startDelay == nil {
		return nil
	}
	return &shapeOptions{MaxAttempts: v.maxAttempts, BaseDelay: v.baseDelay, Timeout: v.timeout, StartDelay: v.startDelay}
}

func modeOr(m, def WhenMode) WhenMode {
	if m == "" {
		return def
	}
	return m
}
