-- ds_fence_get: the partition's fence (read-only).
-- KEYS: fence
-- ARGV: none
-- Reply: offset, topic_id
-- Needs: FENCE_REPLY (Python); call_tag (keys); read_fence (helpers).
--
-- Reply: the applied offset and the topic id, each nil when none.

local function fence_get(keys, _)
    local fence, topic = read_fence(call_tag(keys, 'fence'))
    return {[FENCE_REPLY.offset] = fence or false, [FENCE_REPLY.topic_id] = topic or false}
end
