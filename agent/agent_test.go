package agent

import "testing"

func TestHashCoversWhatTheCallComputes(t *testing.T) {
	temp := 0.5
	base := Request{Prompt: "p", System: "s", Model: "m", Backend: "b", Name: "n", Tools: []string{"a"},
		MaxTokens: 10, Temperature: &temp, SessionID: "x", Schema: map[string]any{"type": "object"}}
	h := base.Hash()
	if len(h) != 64 || h != base.Hash() {
		t.Fatalf("hash %q is not a stable SHA-256", h)
	}
	other := 0.7
	changes := map[string]func(r *Request){
		"prompt":      func(r *Request) { r.Prompt = "q" },
		"system":      func(r *Request) { r.System = "t" },
		"model":       func(r *Request) { r.Model = "m2" },
		"backend":     func(r *Request) { r.Backend = "c" },
		"name":        func(r *Request) { r.Name = "o" },
		"tools":       func(r *Request) { r.Tools = []string{"a", "b"} },
		"max_tokens":  func(r *Request) { r.MaxTokens = 11 },
		"temperature": func(r *Request) { r.Temperature = &other },
		"no temp":     func(r *Request) { r.Temperature = nil },
		"session":     func(r *Request) { r.SessionID = "y" },
		"schema":      func(r *Request) { r.Schema = map[string]any{"type": "array"} },
		// Field boundaries matter: moving text between fields is a different request.
		"boundary": func(r *Request) { r.Prompt, r.System = "sp", "" },
	}
	for name, change := range changes {
		r := base
		change(&r)
		if r.Hash() == h {
			t.Errorf("changing %s does not change the hash", name)
		}
	}
	same := map[string]func(r *Request){
		"timeout": func(r *Request) { r.TimeoutMS = 5 },
		"retries": func(r *Request) { r.Retries = 3 },
		"class":   func(r *Request) { r.Class = ClassBatch },
		"role":    func(r *Request) { r.Role = "critic" },
		"schema key order": func(r *Request) {
			r.Schema = map[string]any{"type": "object"}
		},
	}
	for name, change := range same {
		r := base
		change(&r)
		if r.Hash() != h {
			t.Errorf("changing %s changes the hash", name)
		}
	}
}
