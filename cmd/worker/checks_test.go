package main

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"
)

const goldenDir = "../../testdata/golden/"

func golden(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(goldenDir + name)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

var b64 = base64.RawURLEncoding

// makeToken builds a token the way the official tests do: any header and payload, signed
// with secret (or with sig when sig is not nil).
func makeToken(header, payload string, secret string, sig *string) string {
	h, p := b64.EncodeToString([]byte(header)), b64.EncodeToString([]byte(payload))
	if sig != nil {
		return h + "." + p + "." + *sig
	}
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(h + "." + p))
	return h + "." + p + "." + b64.EncodeToString(m.Sum(nil))
}

type reply struct {
	status int
	ctype  string
	body   string
}

// do sends one request on a fresh connection (so that, with several workers on the port,
// the checks are spread over them).
func do(t *testing.T, method, url, auth, body string) reply {
	t.Helper()
	var rd io.Reader
	if body != "" || method == "POST" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	if method == "POST" {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Close = true
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return reply{resp.StatusCode, resp.Header.Get("Content-Type"), string(b)}
}

func expect(t *testing.T, got reply, status int, body string) {
	t.Helper()
	if got.status != status || got.body != body {
		t.Errorf("got %d %s, want %d %s", got.status, got.body, status, body)
	}
	if !strings.HasPrefix(got.ctype, "application/json") {
		t.Errorf("Content-Type %q, want application/json", got.ctype)
	}
}

// officialChecks runs the challenge's 42 checks in order against base, which must serve a
// fresh copy of the seed.
func officialChecks(t *testing.T, base string) {
	now := time.Now().Unix()
	header := `{"alg":"HS256","typ":"JWT"}`
	payload := fmt.Sprintf(`{"sub":"1","username":"golden_ember_1","iat":%d,"exp":%d}`, now, now+3600)
	valid := "Bearer " + makeToken(header, payload, testSecret, nil)
	forgedSig := b64.EncodeToString([]byte("not the signature at all, 32 by"))
	forged := "Bearer " + makeToken(header, payload, testSecret, &forgedSig)
	empty := ""
	none := "Bearer " + makeToken(`{"alg":"none","typ":"JWT"}`, payload, "", &empty)
	expired := "Bearer " + makeToken(header, fmt.Sprintf(`{"sub":"1","username":"golden_ember_1","iat":%d,"exp":%d}`, now-7200, now-3600), testSecret, nil)
	badSub := "Bearer " + makeToken(header, fmt.Sprintf(`{"sub":"abc","username":"golden_ember_1","iat":%d,"exp":%d}`, now, now+3600), testSecret, nil)
	noName := "Bearer " + makeToken(header, fmt.Sprintf(`{"sub":"1","iat":%d,"exp":%d}`, now, now+3600), testSecret, nil)

	const (
		missing = `{"error":"missing bearer token"}`
		invalid = `{"error":"invalid or expired token"}`
		badLoad = `{"error":"invalid token payload"}`
		badID   = `{"error":"invalid post id"}`
		noPost  = `{"error":"post not found"}`
		reqd    = `{"error":"body is required"}`
	)
	step := 0
	check := func(name string, f func(t *testing.T)) {
		step++
		if !t.Run(fmt.Sprintf("%02d_%s", step, name), f) {
			t.FailNow() // later checks depend on earlier ones
		}
	}
	check("feed status and type", func(t *testing.T) {
		r := do(t, "GET", base+"/feed", "", "")
		if r.status != 200 || !strings.HasPrefix(r.ctype, "application/json") {
			t.Errorf("got %d %q, want 200 application/json", r.status, r.ctype)
		}
	})
	check("feed equals golden", func(t *testing.T) { expect(t, do(t, "GET", base+"/feed", "", ""), 200, golden(t, "feed.json")) })
	for _, id := range []string{"1", "250000", "500000"} {
		check("post "+id+" equals golden", func(t *testing.T) {
			expect(t, do(t, "GET", base+"/posts/"+id, "", ""), 200, golden(t, "post-"+id+".json"))
		})
	}
	check("leading zeros", func(t *testing.T) {
		expect(t, do(t, "GET", base+"/posts/000500000", "", ""), 200, golden(t, "post-500000.json"))
	})
	check("health", func(t *testing.T) {
		r := do(t, "GET", base+"/health", "", "")
		if r.status != 200 || !regexp.MustCompile(`^{"status":"ok","db":"ok","uptime_s":[0-9]+}$`).MatchString(r.body) {
			t.Errorf("got %d %s", r.status, r.body)
		}
	})
	check("unknown path", func(t *testing.T) { expect(t, do(t, "GET", base+"/nope", "", ""), 404, `{"error":"not found"}`) })
	for _, id := range []string{"0", "-1", "abc", "1.5"} {
		check("invalid id "+id, func(t *testing.T) { expect(t, do(t, "GET", base+"/posts/"+id, "", ""), 400, badID) })
	}
	check("post not found", func(t *testing.T) { expect(t, do(t, "GET", base+"/posts/999999999", "", ""), 404, noPost) })
	auths := []struct{ name, auth, want string }{
		{"no token", "", missing}, {"basic auth", "Basic abc", missing},
		{"bearer abc", "Bearer abc", invalid}, {"forged signature", forged, invalid},
		{"alg none", none, invalid}, {"expired", expired, invalid},
		{"sub abc", badSub, badLoad}, {"no username", noName, badLoad},
	}
	for _, a := range auths {
		check("create: "+a.name, func(t *testing.T) { expect(t, do(t, "POST", base+"/posts", a.auth, `{"body":"x"}`), 401, a.want) })
	}
	check("like abc without token", func(t *testing.T) { expect(t, do(t, "POST", base+"/posts/abc/like", "", ""), 401, missing) })
	for _, b := range []struct{ name, body, want string }{
		{"empty body", `{"body":""}`, reqd}, {"blank body", `{"body":"   "}`, reqd},
		{"number body", `{"body":123}`, reqd}, {"no body field", `{}`, reqd},
		{"bad json", `{bad json`, `{"error":"malformed JSON body"}`},
		{"501 chars", `{"body":"` + strings.Repeat("a", 501) + `"}`, `{"error":"body must be at most 500 characters"}`},
	} {
		check("create: "+b.name, func(t *testing.T) { expect(t, do(t, "POST", base+"/posts", valid, b.body), 400, b.want) })
	}

	type post struct {
		ID        int64  `json:"id"`
		Body      string `json:"body"`
		CreatedAt string `json:"created_at"`
		Author    string `json:"author"`
		LikeCount int64  `json:"like_count"`
	}
	var created post
	var createdRaw string
	check("create trims", func(t *testing.T) {
		text := `test: <b>&amp;</b> "quoted" / café ✓`
		in, _ := json.Marshal(map[string]string{"body": "  \t" + text + " \n"})
		r := do(t, "POST", base+"/posts", valid, string(in))
		var got struct{ Post post }
		if r.status != 201 || json.Unmarshal([]byte(r.body), &got) != nil || got.Post.Body != text {
			t.Errorf("got %d %s, want 201 with the trimmed body", r.status, r.body)
		}
	})
	var r reply
	check("create 500 chars: status", func(t *testing.T) {
		r = do(t, "POST", base+"/posts", valid, `{"body":"   `+strings.Repeat("b", 500)+`   "}`)
		if r.status != 201 {
			t.Fatalf("got %d %s, want 201", r.status, r.body)
		}
	})
	check("create 500 chars: exact shape", func(t *testing.T) {
		var got struct{ Post post }
		if err := json.Unmarshal([]byte(r.body), &got); err != nil {
			t.Fatal(err)
		}
		created = got.Post
		createdRaw = fmt.Sprintf(`{"id":%d,"body":"%s","created_at":"%s","author":"golden_ember_1","like_count":0}`,
			created.ID, strings.Repeat("b", 500), created.CreatedAt)
		if r.body != `{"post":`+createdRaw+`}` {
			t.Errorf("got %s, want %s", r.body, `{"post":`+createdRaw+`}`)
		}
	})
	check("create 500 chars: content type", func(t *testing.T) {
		if !strings.HasPrefix(r.ctype, "application/json") {
			t.Errorf("Content-Type %q", r.ctype)
		}
	})
	check("create 500 chars: created_at", func(t *testing.T) {
		if !regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$`).MatchString(created.CreatedAt) {
			t.Fatalf("created_at %q", created.CreatedAt)
		}
		at, err := time.Parse("2006-01-02T15:04:05.000Z", created.CreatedAt)
		if err != nil || time.Since(at).Abs() > 60*time.Second {
			t.Errorf("created_at %q not within 60 s of now (%v)", created.CreatedAt, err)
		}
	})
	likeURL := func(id int64) string { return fmt.Sprintf("%s/posts/%d/like", base, id) }
	check("like new post", func(t *testing.T) {
		expect(t, do(t, "POST", likeURL(created.ID), valid, ""), 201, fmt.Sprintf(`{"liked":true,"already_liked":false,"post_id":%d}`, created.ID))
	})
	check("like again", func(t *testing.T) {
		expect(t, do(t, "POST", likeURL(created.ID), valid, ""), 200, fmt.Sprintf(`{"liked":true,"already_liked":true,"post_id":%d}`, created.ID))
	})
	check("like missing post", func(t *testing.T) { expect(t, do(t, "POST", likeURL(999999999), valid, ""), 404, noPost) })
	check("like abc with token", func(t *testing.T) { expect(t, do(t, "POST", base+"/posts/abc/like", valid, ""), 400, badID) })
	check("new post shows like", func(t *testing.T) {
		want := strings.Replace(createdRaw, `"like_count":0`, `"like_count":1`, 1)
		expect(t, do(t, "GET", fmt.Sprintf("%s/posts/%d", base, created.ID), "", ""), 200, `{"post":`+want+`}`)
	})
	check("like post 1", func(t *testing.T) {
		r := do(t, "POST", likeURL(1), valid, "")
		if r.status != 201 && r.status != 200 {
			t.Errorf("got %d %s", r.status, r.body)
		}
	})
	check("post 1 has 12 likes", func(t *testing.T) {
		want := strings.Replace(golden(t, "post-1.json"), `"like_count":11`, `"like_count":12`, 1)
		expect(t, do(t, "GET", base+"/posts/1", "", ""), 200, want)
	})
	var feed struct{ Posts []json.RawMessage }
	check("feed has 20 posts", func(t *testing.T) {
		r := do(t, "GET", base+"/feed", "", "")
		if err := json.Unmarshal([]byte(r.body), &feed); err != nil || len(feed.Posts) != 20 {
			t.Fatalf("feed: %v, %d posts; want 20", err, len(feed.Posts))
		}
	})
	check("feed starts with the new post", func(t *testing.T) {
		want := strings.Replace(createdRaw, `"like_count":0`, `"like_count":1`, 1)
		if string(feed.Posts[0]) != want {
			t.Errorf("first post %s, want %s", feed.Posts[0], want)
		}
	})
	if step != 42 {
		t.Errorf("ran %d checks, want the official 42", step)
	}
}
