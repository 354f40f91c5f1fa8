package redisscript

import "strings"

// HashTag returns the Redis Cluster hash tag of key: the text between the first
// '{' and the next '}', when that is not empty. Keys with the same tag share a
// hash slot, so one script can touch them all.
func HashTag(key string) (string, bool) {
	i := strings.IndexByte(key, '{')
	if i < 0 {
		return "", false
	}
	j := strings.IndexByte(key[i+1:], '}')
	if j <= 0 {
		return "", false
	}
	return key[i+1 : i+1+j], true
}
