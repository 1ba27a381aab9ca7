package lua

import (
	"strings"

	"github.com/luft-run/luft/event"
	glua "github.com/yuin/gopher-lua"
)

// phaseFn is phase(label [, planned]) and phase{label=, planned=, description=}.
func (v *vm) phaseFn(L *glua.LState) int {
	var label, desc string
	planned := 0
	readPlanned := func(val glua.LValue) {
		switch n := val.(type) {
		case glua.LNumber:
			if !wholeIn(float64(n), 0, maxWidth) {
				L.RaiseError("phase: planned must be a whole number from 0 to %d, got %s", maxWidth, n.String())
			}
			planned = int(n)
		case *glua.LNilType:
		default:
			L.RaiseError("phase: planned must be a number, got a %s", val.Type())
		}
	}
	switch a := L.Get(1).(type) {
	case glua.LString:
		label = string(a)
		readPlanned(L.Get(2))
	case *glua.LTable:
		if l, ok := a.RawGetString("label").(glua.LString); ok {
			label = string(l)
		} else if l, ok := a.RawGetInt(1).(glua.LString); ok {
			label = string(l)
		}
		if p := a.RawGetString("planned"); p != glua.LNil {
			readPlanned(p)
		} else {
			readPlanned(a.RawGetInt(2))
		}
		if d, ok := a.RawGetString("description").(glua.LString); ok {
			desc = string(d)
		}
	default:
		L.RaiseError("phase: expected phase(label [, planned]) or phase{label=..., planned=..., description=...}")
	}
	if strings.TrimSpace(label) == "" {
		L.RaiseError("phase: the label must be a non-empty string")
	}
	if desc == "" && v.current != nil {
		desc = v.current.wf.metaDesc[label]
	}
	v.closePhase()
	v.phaseSeq++
	v.phase = &phaseState{id: v.phaseSeq, label: label}
	data := map[string]any{"phase_id": v.phaseSeq, "label": label, "planned": planned}
	if desc != "" {
		data["description"] = desc
	}
	v.emit(event.PhaseStarted, data)
	L.Push(glua.LNumber(v.phaseSeq))
	return 1
}

type phaseState struct {
	id         int
	label      string
	ok, failed int
	cancelled  int // cut off by a cancel: not failed
}

func (v *vm) phaseID() int {
	if v.phase == nil {
		return 0
	}
	return v.phase.id
}

func (v *vm) closePhase() {
	if v.phase == nil {
		return
	}
	p := v.phase
	v.phase = nil
	v.emit(event.PhaseDone, map[string]any{"phase_id": p.id, "label": p.label, "ok": p.ok, "failed": p.failed, "cancelled": p.cancelled})
}
