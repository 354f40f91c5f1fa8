package zklock

import (
	"encoding/json"
	"strconv"
	"time"
)

// nodeData is the data of a lock node.
type nodeData struct {
	TTL      int64  `json:"ttl_ms"`
	Metadata string `json:"metadata,omitempty"`
}

func encodeData(ttl time.Duration, metadata string) []byte {
	if !plainJSON(metadata) {
		b, _ := json.Marshal(nodeData{TTL: ttl.Milliseconds(), Metadata: metadata})
		return b
	}
	// What json.Marshal writes, without its reflection.
	b := make([]byte, 0, 32+len(metadata))
	b = append(b, `{"ttl_ms":`...)
	b = strconv.AppendInt(b, ttl.Milliseconds(), 10)
	if metadata != "" {
		b = append(b, `,"metadata":"`...)
		b = append(b, metadata...)
		b = append(b, '"')
	}
	return append(b, '}')
}

// plainJSON reports whether s is written as it is inside a JSON string by
// json.Marshal: printable ASCII without '"', '\\', '<', '>' and '&'.
func plainJSON(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			return false
		}
	}
	return true
}

// decodeData reads a lock node's data; a node whose data is not a dlock record
// reads as TTL unknown.
func decodeData(b []byte) (nodeData, bool) {
	var nd nodeData
	if err := json.Unmarshal(b, &nd); err != nil || nd.TTL <= 0 {
		return nodeData{TTL: -1}, false
	}
	return nd, true
}

// remaining is the TTL left on a node whose data says ttl and which was last
// written at mtime (ms since the epoch, the ZooKeeper leader's clock), or -1 when
// unknown or already past.
func remaining(nd nodeData, mtime int64) time.Duration {
	if nd.TTL <= 0 {
		return -1
	}
	left := time.Duration(mtime+nd.TTL-time.Now().UnixMilli()) * time.Millisecond
	if left <= 0 {
		return -1
	}
	return min(left, time.Duration(nd.TTL)*time.Millisecond)
}
