package lua

import (
	"errors"
	"fmt"
	"strings"

	glua "github.com/yuin/gopher-lua"
)

type metaPhase struct {
	Label, Description string
}

func (v *vm) checkWorkflow(wf *workflowState) error {
	if _, ok := wf.env.RawGetString("main").(*glua.LFunction); !ok {
		return &ScriptError{Kind: KindInvalid, Where: wf.prog.Name,
			Msg: "the script defines no function main(); add `function main() ... end` (top-level code runs first, then main)"}
	}
	if mv := wf.env.RawGetString("meta"); mv != glua.LNil {
		meta, phases, err := v.readMeta(mv)
		if err != nil {
			return &ScriptError{Kind: KindInvalid, Where: wf.prog.Name, Msg: "invalid meta: " + err.Error()}
		}
		wf.meta = meta
		// By label, so that phase() finds its description at once however many
		// phases the plan names; the last of a repeated label wins.
		wf.metaDesc = make(map[string]string, len(phases))
		for _, p := range phases {
			wf.metaDesc[p.Label] = p.Description
		}
	}
	return nil
}

func (v *vm) readMeta(mv glua.LValue) (any, []metaPhase, error) {
	if _, ok := mv.(*glua.LTable); !ok {
		return nil, nil, fmt.Errorf("meta must be a table, not a %s", mv.Type())
	}
	m, err := v.codec.FromLua(mv)
	if err != nil {
		return nil, nil, err
	}
	obj, ok := m.(map[string]any)
	if !ok {
		return nil, nil, errors.New("meta must be a table with named fields (reasoning, phases)")
	}
	for k := range obj {
		if k != "reasoning" && k != "phases" && k != "name" && k != "description" {
			return nil, nil, fmt.Errorf("unknown field meta.%s (known: reasoning, phases, name, description)", k)
		}
	}
	if r, ok := obj["reasoning"]; ok {
		if _, isStr := r.(string); !isStr {
			return nil, nil, errors.New("meta.reasoning must be a string")
		}
	}
	var phases []metaPhase
	if p, ok := obj["phases"]; ok {
		list, isList := p.([]any)
		if m, isMap := p.(map[string]any); isMap && len(m) == 0 {
			list, isList = []any{}, true
			obj["phases"] = list
		}
		if !isList {
			return nil, nil, errors.New("meta.phases must be a list of {label=..., description=...}")
		}
		seen := map[string]bool{}
		for i, e := range list {
			ph, ok := e.(map[string]any)
			if !ok {
				return nil, nil, fmt.Errorf("meta.phases[%d] must be a table {label=..., description=...}", i+1)
			}
			label, _ := ph["label"].(string)
			if strings.TrimSpace(label) == "" {
				return nil, nil, fmt.Errorf("meta.phases[%d].label must be a non-empty string", i+1)
			}
			if seen[label] {
				return nil, nil, fmt.Errorf("meta.phases[%d].label %q is used twice; labels must be unique", i+1, label)
			}
			seen[label] = true
			if d, ok := ph["dynamic"]; ok {
				if _, isBool := d.(bool); !isBool {
					return nil, nil, fmt.Errorf("meta.phases[%d].dynamic must be true or false", i+1)
				}
			}
			desc, _ := ph["description"].(string)
			if desc == "" {
				desc, _ = ph["detail"].(string) // Luft's planner writes detail
			}
			phases = append(phases, metaPhase{Label: label, Description: desc})
		}
	}
	return obj, phases, nil
}
