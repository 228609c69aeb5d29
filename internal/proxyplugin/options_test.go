package proxyplugin

import (
	"os"
	"path/filepath"
	"testing"
)

func TestHeaderFlag(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name, content string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	key := write("key", "  s3cret-key\n")
	twoLines := write("two-lines", "s3cret\nX-Injected: 1\n")
	tests := []struct {
		flag, wantName, wantValue, wantErr string
	}{
		{flag: "X-Api-Key=abc", wantName: "X-Api-Key", wantValue: "abc"},
		{flag: "X-Empty=", wantName: "X-Empty", wantValue: ""},
		{flag: "Authorization=Bearer a=b", wantName: "Authorization", wantValue: "Bearer a=b"},
		{flag: "X-Api-Key=@" + key, wantName: "X-Api-Key", wantValue: "s3cret-key"},
		{flag: "X-Api-Key", wantErr: "invalid --header X-Api-Key: want NAME=VALUE or NAME=@FILE, where NAME is a header name"},
		{flag: "=s3cret", wantErr: "invalid --header: want NAME=VALUE or NAME=@FILE, where NAME is a header name"},
		{flag: "X-Api-Key: s3cret", wantErr: "invalid --header: want NAME=VALUE or NAME=@FILE, where NAME is a header name"},
		{flag: "X Api=s3cret", wantErr: "invalid --header: want NAME=VALUE or NAME=@FILE, where NAME is a header name"},
		{flag: "X-Api-Key=@" + filepath.Join(dir, "missing"), wantErr: "--header X-Api-Key=@" + filepath.Join(dir, "missing") + ": open " + filepath.Join(dir, "missing") + ": no such file or directory"},
		{flag: "X-Api-Key=@" + twoLines, wantErr: "--header X-Api-Key: the value holds a control character (a line break?), which a header cannot carry"},
		{flag: "Connection=X-Api-Key", wantErr: "invalid --header Connection: the proxy does not forward that header as set (it is hop-by-hop, or the transport writes it from the request itself), so the API server would not get it, or not the value signed"},
		{flag: "te=gzip", wantErr: "invalid --header te: the proxy does not forward that header as set (it is hop-by-hop, or the transport writes it from the request itself), so the API server would not get it, or not the value signed"},
		{flag: "Host=other", wantErr: "invalid --header Host: the proxy does not forward that header as set (it is hop-by-hop, or the transport writes it from the request itself), so the API server would not get it, or not the value signed"},
		{flag: "X-Api-Key=s3cret\r\nX-Injected: 1", wantErr: "--header X-Api-Key: the value holds a control character (a line break?), which a header cannot carry"},
	}
	for _, tt := range tests {
		name, value, err := headerFlag("--header", tt.flag)
		var gotErr string
		if err != nil {
			gotErr = err.Error()
		}
		if name != tt.wantName || value != tt.wantValue || gotErr != tt.wantErr {
			t.Errorf("headerFlag(%q) = %q, %q, %q\nwant %q, %q, %q", tt.flag, name, value, gotErr, tt.wantName, tt.wantValue, tt.wantErr)
		}
	}
}
