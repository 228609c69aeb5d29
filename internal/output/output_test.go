package output

import (
	"bytes"
	"testing"
	"time"
)

type sample struct {
	Name    string     `json:"name"`
	Note    string     `json:"note,omitempty"`
	When    *time.Time `json:"when,omitempty"`
	Entries []string   `json:"entries"`
}

func TestWrite(t *testing.T) {
	t.Parallel()
	when := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	v := sample{Name: "<redacted, 3 bytes>", When: &when, Entries: []string{"a", "b"}}
	tests := []struct{ format, want string }{
		{JSON, "{\n  \"name\": \"<redacted, 3 bytes>\",\n  \"when\": \"2026-01-02T03:04:05Z\",\n  \"entries\": [\n    \"a\",\n    \"b\"\n  ]\n}\n"},
		{YAML, "entries:\n- a\n- b\nname: <redacted, 3 bytes>\nwhen: \"2026-01-02T03:04:05Z\"\n"},
	}
	for _, tt := range tests {
		var b bytes.Buffer
		if err := Write(&b, tt.format, v); err != nil {
			t.Fatal(err)
		}
		if b.String() != tt.want {
			t.Errorf("%s:\n%s\nwant\n%s", tt.format, b.String(), tt.want)
		}
	}
	if err := Write(&bytes.Buffer{}, Text, v); err == nil || err.Error() != `output: "text" is not a structured format` {
		t.Errorf("Write(text) = %v", err)
	}
}

func TestCheck(t *testing.T) {
	t.Parallel()
	if err := Check("yaml", Text, JSON, YAML); err != nil {
		t.Error(err)
	}
	for _, tt := range []struct {
		allowed []string
		want    string
	}{
		{[]string{Text, JSON, YAML}, `invalid --output "xml": want text, json or yaml`},
		{[]string{JSON, YAML}, `invalid --output "xml": want json or yaml`},
		{[]string{JSON}, `invalid --output "xml": want json`},
	} {
		if err := Check("xml", tt.allowed...); err == nil || err.Error() != tt.want {
			t.Errorf("Check(xml, %v) = %v, want %s", tt.allowed, err, tt.want)
		}
	}
}
