-- ds_close: closes a timeline's open digest; the timeline waits for its next one.
-- KEYS: timeline, digest, waiting, ready
-- ARGV: timeline, digest_id, now, minimum_delay, ttl, partition_ttl, next_fire, flush_at
-- Reply: closed
-- Needs: MAX_OFFSET (Python); parse_digest_id, parse_integer, parse_time, parse_ttl (guards);
--   refresh_partition_ttl (helpers); apply_moves, close_target, new_moves, parse_next_fire,
--   timeline_keys (digests).
--
-- next_fire: the calendar schedule's next fire time ("" = none); the timeline waits for it
-- instead of a cool-down. flush_at: 0 = off. Reply: 1 when that digest was closed, 0 for an
-- unknown or already closed id.

local function close(keys, args)
    local tag, timeline = timeline_keys(keys, args)
    local digest_id = parse_digest_id(args[2])
    local now = parse_time(args[3], 'now')
    local minimum = parse_time(args[4], 'minimum_delay')
    local ttl = parse_ttl(args[5])
    local partition_ttl = parse_ttl(args[6])
    local next_fire = parse_next_fire(args[7])
    local moves = new_moves()
    local closed, waits = close_target(tag, timeline, digest_id, now, minimum, ttl, next_fire,
        parse_integer(args[8], 'flush_at', 0, MAX_OFFSET), moves)
    apply_moves(tag, moves)
    if waits then
        refresh_partition_ttl(tag, math.max(ttl, partition_ttl))
    end
    return closed
end
