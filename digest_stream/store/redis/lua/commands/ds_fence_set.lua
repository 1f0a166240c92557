-- ds_fence_set: writes exactly this fence (a reset for a new topic, an admin replay).
-- KEYS: fence
-- ARGV: offset, topic_id
-- Reply: 1
-- Needs: MAX_OFFSET (Python); parse_integer, parse_topic_id (guards); call_tag (keys);
--   write_fence (helpers).
--
-- offset, topic_id: "" = none (both "": the fence is removed). The fence never expires.

local function fence_set(keys, args)
    local tag = call_tag(keys, 'fence')
    local offset
    if args[1] ~= '' then
        offset = parse_integer(args[1], 'offset', 0, MAX_OFFSET)
    end
    write_fence(tag, offset, parse_topic_id(args[2] or ''))
    return 1
end
