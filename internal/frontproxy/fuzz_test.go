package frontproxy

import (
	"strings"
	"testing"
)

// FuzzRender: Render either fills every placeholder or says which one it could not.
func FuzzRender(f *testing.F) {
	f.Add("listen @LISTEN@; server @UPSTREAM@;", "/srv")
	f.Add("@STATIC_ROOT@ @@ @A@ @@LISTEN@@", "")
	f.Add("$var @", "relative")
	f.Fuzz(func(t *testing.T, tmpl, root string) {
		if strings.Contains(root, "@") {
			return // a value could then spell a placeholder itself
		}
		out, err := Render([]byte(tmpl), Params{StaticRoot: root})
		if err != nil {
			if !placeholder.MatchString(tmpl) && root != "" && !strings.Contains(err.Error(), "absolute") {
				t.Errorf("Render(%q) = %v with no placeholder in the template", tmpl, err)
			}
			return
		}
		if m := placeholder.Find(out); m != nil {
			t.Errorf("Render(%q) = %q: placeholder %s left unfilled", tmpl, out, m)
		}
	})
}

// FuzzParseVersion: whatever nginx -v prints, parseVersion returns an X.Y.Z or nothing.
func FuzzParseVersion(f *testing.F) {
	f.Add("nginx version: nginx/1.22.1")
	f.Add("nginx/1.2.3.4")
	f.Add("nginx/")
	f.Fuzz(func(t *testing.T, s string) {
		v, ok := parseVersion(s)
		if !ok {
			return
		}
		if _, ok := versionParts(v); !ok {
			t.Errorf("parseVersion(%q) = %q, not X.Y.Z", s, v)
		}
	})
}
