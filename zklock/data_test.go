package zklock

import (
	"encoding/json"
	"testing"
	"time"
)

// TestEncodeDataIsJSON: the node data is what json.Marshal writes, with or
// without metadata that needs escaping.
func TestEncodeDataIsJSON(t *testing.T) {
	for _, md := range []string{"", "host-1 pid 42", `a"b`, `back\slash`, "<tag>&", "tab\there", "ünï", "\x00"} {
		want, _ := json.Marshal(nodeData{TTL: 1500, Metadata: md})
		if got := encodeData(1500*time.Millisecond, md); string(got) != string(want) {
			t.Errorf("metadata %q: %s, want %s", md, got, want)
		}
		if nd, ok := decodeData(encodeData(time.Second, md)); !ok || nd.Metadata != md || nd.TTL != 1000 {
			t.Errorf("metadata %q: decoded %+v, %v", md, nd, ok)
		}
	}
}
