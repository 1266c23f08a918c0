package pgflow

import (
	"strconv"
	"strings"
)

// CompileSQL returns the SQL statements that create the flow in a database, for teams that keep flow
// definitions in migration files: one `select pgflow.create_flow(...);` followed by one
// `select pgflow.add_step(...);` per step in definition order, each on one line, with named arguments and only
// the options that are set, e.g.
//
//	select pgflow.create_flow(flow_slug => 'orders', max_attempts => 3, timeout => 30);
//	select pgflow.add_step(flow_slug => 'orders', step_slug => 'fetch');
//	select pgflow.add_step(flow_slug => 'orders', step_slug => 'items', deps_slugs => array['fetch'], step_type => 'map', required_input_pattern => '{"fetch":{"ok":true}}'::jsonb);
//
// A flow defined with QueuePerStep gets queue_mode => 'step' (add_step then creates each step's queue), one defined
// with DeleteTaskMessages message_retention => 'delete'. Run them
// in one transaction. Both functions are idempotent: re-running leaves an existing flow unchanged.
// String literals are quoted safely whatever standard_conforming_strings is. CompileSQL freezes the flow and
// fails with the recorded definition errors if there are any.
func (f *Flow[I]) CompileSQL() ([]string, error) {
	steps, err := f.c.freeze()
	if err != nil {
		return nil, err
	}
	return compileSQL(f.c.slug, &f.c.opts, steps), nil
}

func compileSQL(flowSlug string, flowOpts *optionValues, steps []*stepDef) []string {
	out := make([]string, 0, len(steps)+1)

	args := []string{"flow_slug => " + quoteLiteral(flowSlug)}
	args = appendIntArg(args, "max_attempts", flowOpts.maxAttempts)
	args = appendIntArg(args, "base_delay", flowOpts.baseDelay)
	args = appendIntArg(args, "timeout", flowOpts.timeout)
	if flowOpts.queuePerStep {
		args = append(args, "queue_mode => 'step'")
	}
	if flowOpts.deleteMessages {
		args = append(args, "message_retention => 'delete'")
	}
	out = append(out, "select pgflow.create_flow("+strings.Join(args, ", ")+");")

	for _, d := range steps {
		args := []string{"flow_slug => " + quoteLiteral(flowSlug), "step_slug => " + quoteLiteral(d.slug)}
		if len(d.deps) > 0 {
			q := make([]string, len(d.deps))
			for i, dep := range d.deps {
				q[i] = quoteLiteral(dep.slug)
			}
			args = append(args, "deps_slugs => array["+strings.Join(q, ", ")+"]")
		}
		args = appendIntArg(args, "max_attempts", d.opts.maxAttempts)
		args = appendIntArg(args, "base_delay", d.opts.baseDelay)
		args = appendIntArg(args, "timeout", d.opts.timeout)
		args = appendIntArg(args, "start_delay", d.opts.startDelay)
		if d.stepType == stepTypeMap {
			args = append(args, "step_type => 'map'")
		}
		if d.opts.ifPattern != nil {
			args = append(args, "required_input_pattern => "+quoteLiteral(string(d.opts.ifPattern))+"::jsonb")
		}
		if d.opts.ifNotPattern != nil {
			args = append(args, "forbidden_input_pattern => "+quoteLiteral(string(d.opts.ifNotPattern))+"::jsonb")
		}
		if d.opts.whenUnmet != "" {
			args = append(args, "when_unmet => "+quoteLiteral(string(d.opts.whenUnmet)))
		}
		if d.opts.whenExhausted != "" {
			args = append(args, "when_exhausted => "+quoteLiteral(string(d.opts.whenExhausted)))
		}
		out = append(out, "select pgflow.add_step("+strings.Join(args, ", ")+");")
	}
	return out
}

func appendIntArg(args []string, name string, v *int) []string {
	if v == nil {
		return args
	}
	return append(args, name+" => "+strconv.Itoa(*v))
}

// quoteLiteral renders s as a PostgreSQL string literal: single quotes are doubled, and a string containing a
// backslash is written as an escape string (E'...') with doubled backslashes, so the result reads back as s
// whether standard_conforming_strings is on or off. s must not contain NUL (slugs and canonical JSON never do).
func quoteLiteral(s string) string {
	s = strings.ReplaceAll(s, "'", "''")
	if strings.Contains(s, `\`) {
		return "E'" + strings.ReplaceAll(s, `\`, `\\`) + "'"
	}
	return "'" + s + "'"
}
