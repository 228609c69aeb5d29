package execplugin

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestMergeEnv(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		layers  [][]string
		want    []string
		wantErr string
	}{
		{
			name:   "later layers win and keep the first position",
			layers: [][]string{{"A=1", "B=1", "C=1"}, {"B=2", "D=2"}, {"A=3"}},
			want:   []string{"A=3", "B=2", "C=1", "D=2"},
		},
		{
			name:   "duplicates inside one layer: last wins",
			layers: [][]string{{"A=1", "A=2"}},
			want:   []string{"A=2"},
		},
		{
			name:   "empty values and values with '=' are kept",
			layers: [][]string{{"A=", "B=x=y"}},
			want:   []string{"A=", "B=x=y"},
		},
		{
			name:    "an entry without '=' is an error and its text is shown",
			layers:  [][]string{{"A=1"}, {"BROKEN"}},
			wantErr: `invalid environment entry "BROKEN": want NAME=VALUE`,
		},
		{
			name:    "an entry with an empty name is an error and its value is redacted",
			layers:  [][]string{{"=s3cr3t"}},
			wantErr: `invalid environment entry "=<redacted>": want NAME=VALUE`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := MergeEnv(tt.layers...)
			if tt.wantErr != "" {
				if err == nil || err.Error() != tt.wantErr {
					t.Fatalf("err = %v, want %s", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("MergeEnv (-want +got):\n%s", diff)
			}
		})
	}
}

func TestByteSize(t *testing.T) {
	t.Parallel()
	for n, want := range map[int]string{12: "12 bytes", 1536: "1.5 KiB", 4 << 20: "4 MiB", 131073: "128.0 KiB"} {
		if got := byteSize(n); got != want {
			t.Errorf("byteSize(%d) = %q, want %q", n, got, want)
		}
	}
}
