package lua

import "testing"

func TestSmoke(t *testing.T) {
	h := newFakeHost()
	out, err := runScript(t, h, `
function main()
  local r = agent{prompt="hi", name="a"}
  local p = parallel({1,2,3}, function(x, i) return agent{prompt="p"..x}.output end)
  local ok, e = pcall(agent, {prompt="fail me"})
  report({r=r.output, p=p, ok=ok, e=e})
end`)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%#v", out.Report)
	t.Logf("%v", h.keys())
}
