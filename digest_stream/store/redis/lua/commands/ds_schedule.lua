-- ds_schedule: due WAITING timelines -> READY, one bounded slice of the backlog per call.
-- KEYS: waiting, ready, fence
-- ARGV: now, partition_ttl, limit, nonce
-- Reply: moved, more
-- Holds: schedule.
-- Needs: DUE_REPLY, MAX_SLICE, SCHEDULE_REPLY_TTL (Python); parse_integer, parse_nonce,
--   parse_time, parse_ttl (guards); call_tag, moved_key, ready_key, waiting_key (keys);
--   format_float, format_integer, ttl_ms (encoding); move_range, refresh_partition_ttl
--   (helpers); snoozes (snoozes); adopt_leading_18 (upgrades).
--
-- Reply: moved: {timeline, due, ...}, up to `limit` timelines moved WAITING -> READY
-- (earliest due first); more = 1 when further due ones remain for the next call.
-- nonce ("" = none): the call's own (OPEN_NONCE_LENGTH hex). A client may re-send a call
-- whose reply it lost (redis-py's default retry): the re-run found what the first run
-- moved READY already and named none of it, so nobody announced them until maintenance. A
-- call that moved something keeps its nonce and reply (key T:m, SCHEDULE_REPLY_TTL); a
-- call with that very nonce answers that reply again and moves nothing: the same reply as
-- the first run's, as if it had arrived. Only the partition's last such call is kept.

local function schedule(keys, args)
    local tag = call_tag(keys, 'partition')
    local now = parse_time(args[1], 'now')
    local partition_ttl = parse_ttl(args[2])
    local limit = parse_integer(args[3], 'limit', 1, MAX_SLICE)
    local nonce = parse_nonce(args[4], 'schedule nonce')
    local memo = moved_key(tag)
    if nonce ~= nil then
        local kept = redis.call('GET', memo)
        -- the nonce, then the reply as msgpack (a hex nonce cannot be mistaken for msgpack)
        if kept and string.sub(kept, 1, #nonce) == nonce then
            return cmsgpack.unpack(string.sub(kept, #nonce + 1))
        end
    end
    -- after the re-send's answer: the first run adopted already
    adopt_leading_18(tag, partition_ttl)
    local ready_at = format_float(now)
    local moved, more = move_range(waiting_key(tag), ready_key(tag), ready_at, function()
        return ready_at
    end, limit)
    moved = snoozes.hold_due(tag, moved, now) -- a snoozed one waits for its snooze's end
    refresh_partition_ttl(tag, partition_ttl)
    local reply = {[DUE_REPLY.moved] = moved, [DUE_REPLY.more] = more and 1 or 0}
    if nonce ~= nil and #moved > 0 then
        redis.call('SET', memo, nonce .. cmsgpack.pack(reply), 'PX',
            format_integer(ttl_ms(SCHEDULE_REPLY_TTL)))
    end
    return reply
end
