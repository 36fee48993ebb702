package systemd

import (
	"slices"
	"strings"
	"testing"
)

func TestParseEnvFile(t *testing.T) {
	cases := []struct {
		name, text string
		want       []string
		err        string
	}{
		{name: "plain", text: "A=1\nB = two words \n", want: []string{"A=1", "B=two words"}},
		{name: "comments and blanks", text: "# c\n ; c\n\n\tA=1 # not a comment\n", want: []string{"A=1 # not a comment"}},
		// The review's three cases, where the earlier reader and systemd disagreed.
		{name: "unquoted backslash", text: `A=a\b` + "\n" + `B=a\\b` + "\n" + `C=\#x`, want: []string{"A=ab", `B=a\b`, "C=#x"}},
		{name: `\$ in double quotes`, text: `A="a\$b\"c\\d\n"`, want: []string{`A=a$b"c\d\n`}},
		{name: "a carriage return ends a line", text: "A=1\rB=2\r\nC=3", want: []string{"A=1", "B=2", "C=3"}},
		{name: "continued line", text: "A=one \\\n two\nB=x", want: []string{"A=one  two", "B=x"}},
		{name: "continued in double quotes", text: "A=\"one\\\ntwo\"", want: []string{"A=onetwo"}},
		{name: "single quotes keep all", text: `A='a\b "c" $d'`, want: []string{`A=a\b "c" $d`}},
		{name: "quotes span lines", text: "A='x\ny'\nB=1", want: []string{"A=x\ny", "B=1"}},
		{name: "quoted parts follow one another", text: `A="x" 'y'z`, want: []string{"A=xyz"}},
		{name: "a quote after text is a character", text: `A=x"y z"`, want: []string{`A=x"y z"`}},
		{name: "no expansion", text: "A=$HOME/x", want: []string{"A=$HOME/x"}},
		{name: "empty", text: "A=\nB=''", want: []string{"A=", "B="}},
		{name: "later wins (both kept, in order)", text: "A=1\nA=2", want: []string{"A=1", "A=2"}},
		{name: "escaped comment backslash", text: "# a \\\\\nA=1", want: []string{"A=1"}},
		{name: "trailing blanks after an escape kept", text: `A=a\ `, want: []string{"A=a "}},

		{name: "no =", text: "A\n", err: `line 1: "A": want NAME=VALUE`},
		{name: "export", text: "export A=1", err: `"export A": want NAME=VALUE, NAME of letters`},
		{name: "bad name", text: "1A=x", err: "NAME of letters"},
		{name: "double quote not closed", text: "A=1\nB=\"x\nC=2", err: "line 2: B: the double quote is not closed"},
		{name: "single quote not closed", text: "B='x", err: "the single quote is not closed"},
		{name: "comment ending in a backslash", text: "A=1\n# c \\\nB=2", err: "line 2: a comment ending in a backslash"},
		{name: "not UTF-8", text: "A=\xff", err: "not UTF-8"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := ParseEnvFile(c.text)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("ParseEnvFile(%q) = %q, %v; want an error with %q", c.text, got, err, c.err)
				}
				return
			}
			if err != nil || !slices.Equal(got, c.want) {
				t.Fatalf("ParseEnvFile(%q) = %q, %v; want %q", c.text, got, err, c.want)
			}
			if ref := systemdReference(c.text); !slices.Equal(ref, c.want) {
				t.Errorf("the reference reads %q as %q: the case's want is not systemd's", c.text, ref)
			}
		})
	}
}

// FuzzParseEnvFile: whatever ParseEnvFile accepts, it reads as systemd does (the
// reference below, a transliteration of systemd's env-file.c, character by character).
func FuzzParseEnvFile(f *testing.F) {
	for _, s := range []string{"A=1\n", `A="a\$b"`, "A=x\\\ny", "A='q'\"r\" s \n", "#c\\\\\nB=\\\r", "A=\"\\\r\""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, text string) {
		got, err := ParseEnvFile(text)
		if err != nil {
			return
		}
		if ref := systemdReference(text); !slices.Equal(got, ref) {
			t.Fatalf("ParseEnvFile(%q) = %q; systemd reads %q", text, got, ref)
		}
	})
}

// systemdReference reads text with systemd's parse_env_file_internal state machine as it
// is written in C (systemd 254+), keeping every assignment whatever its name.
func systemdReference(text string) []string {
	const (
		preKey = iota
		key
		preValue
		value
		valueEscape
		singleQuote
		doubleQuote
		doubleQuoteEscape
		comment
		commentEscape
	)
	isNL := func(c byte) bool { return c == '\n' || c == '\r' }
	isWS := func(c byte) bool { return c == ' ' || c == '\t' || isNL(c) }
	var out []string
	var k, v []byte
	lastKeyWS, lastValueWS := -1, -1
	push := func(trimValue bool) {
		kk := k
		if lastKeyWS >= 0 {
			kk = kk[:lastKeyWS]
		}
		vv := v
		if trimValue && lastValueWS >= 0 {
			vv = vv[:lastValueWS]
		}
		out = append(out, string(kk)+"="+string(vv))
		k, v = k[:0], nil
	}
	state := preKey
	for i := 0; i < len(text); i++ {
		c := text[i]
		switch state {
		case preKey:
			if c == '#' || c == ';' {
				state = comment
			} else if !isWS(c) {
				state, lastKeyWS = key, -1
				k = append(k, c)
			}
		case key:
			if isNL(c) {
				state, k = preKey, k[:0]
			} else if c == '=' {
				state, lastValueWS = preValue, -1
			} else {
				if !isWS(c) {
					lastKeyWS = -1
				} else if lastKeyWS == -1 {
					lastKeyWS = len(k)
				}
				k = append(k, c)
			}
		case preValue:
			switch {
			case isNL(c):
				state = preKey
				push(false)
			case c == '\'':
				state = singleQuote
			case c == '"':
				state = doubleQuote
			case c == '\\':
				state = valueEscape
			case !isWS(c):
				state = value
				v = append(v, c)
			}
		case value:
			switch {
			case isNL(c):
				state = preKey
				push(true)
			case c == '\\':
				state, lastValueWS = valueEscape, -1
			default:
				if !isWS(c) {
					lastValueWS = -1
				} else if lastValueWS == -1 {
					lastValueWS = len(v)
				}
				v = append(v, c)
			}
		case valueEscape:
			state = value
			if !isNL(c) {
				v = append(v, c)
			}
		case singleQuote:
			if c == '\'' {
				state = preValue
			} else {
				v = append(v, c)
			}
		case doubleQuote:
			if c == '"' {
				state = preValue
			} else if c == '\\' {
				state = doubleQuoteEscape
			} else {
				v = append(v, c)
			}
		case doubleQuoteEscape:
			state = doubleQuote
			if strings.IndexByte("\"\\`$", c) >= 0 {
				v = append(v, c)
			} else if c != '\n' {
				v = append(v, '\\', c)
			}
		case comment:
			if c == '\\' {
				state = commentEscape
			} else if isNL(c) {
				state = preKey
			}
		case commentEscape:
			if isNL(c) {
				state = preKey
			} else {
				state = comment
			}
		}
	}
	switch state {
	case preValue, valueEscape, singleQuote, doubleQuote, doubleQuoteEscape:
		push(false)
	case value:
		push(true)
	}
	return out
}
