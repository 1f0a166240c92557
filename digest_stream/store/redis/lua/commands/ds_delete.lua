-- ds_delete: removes a timeline and everything it owns.
-- KEYS: timeline, digest, waiting, ready
-- ARGV: timeline
-- Reply: removed
-- Needs: batches (batches); digest_key, ready_key, timeline_key, waiting_key (keys);
--   snoozes (snoozes); timeline_keys (digests).
--
-- Reply: 1 when anything of the timeline existed (its snooze included), else 0.

local function delete(keys, args)
    local tag, timeline = timeline_keys(keys, args)
    -- a digest in batch form goes with its index entry (batches.lua)
    local indexed = batches.forget(tag, timeline)
    local removed = indexed + redis.call('DEL', timeline_key(tag, timeline), digest_key(tag, timeline))
        + redis.call('ZREM', ready_key(tag), timeline)
        + redis.call('ZREM', waiting_key(tag), timeline) + snoozes.forget(tag, timeline)
    if removed > 0 then
        return 1
    end
    return 0
end
