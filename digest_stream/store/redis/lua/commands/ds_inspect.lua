-- ds_inspect: describes one timeline (read-only).
-- KEYS: timeline, digest, waiting, ready
-- ARGV: timeline
-- Reply: state, due, last_delivery, pending, digest_id, open_records, dropped, cause, snoozed
-- Needs: CAUSES, INSPECT_REPLY, STATES (Python); batches (batches); digest_key, ready_key,
--   timeline_key, waiting_key (keys); format_float, parse_digest_meta, parse_timeline_meta
--   (encoding); last_delivery_of (container_writes); read_meta, record_count (containers);
--   snoozes (snoozes); timeline_keys (digests).
--
-- Reply: due, last_delivery, digest_id, cause and snoozed nil when none; cause is the letter
-- recorded with its records, else with its open digest; snoozed: its snooze's end as stored
-- (one that has ended may still be there: the caller compares it with its clock).

local function inspect(keys, args)
    local tag, timeline = timeline_keys(keys, args)
    local source = timeline_key(tag, timeline)
    local state, due = STATES.absent, nil
    local ready_since = redis.call('ZSCORE', ready_key(tag), timeline)
    local waiting_due = redis.call('ZSCORE', waiting_key(tag), timeline)
    if ready_since ~= false then
        state, due = STATES.ready, ready_since
    elseif waiting_due ~= false then
        state, due = STATES.waiting, waiting_due
    end
    local meta = parse_timeline_meta(read_meta(source))
    local digest = parse_digest_meta(read_meta(digest_key(tag, timeline)))
    -- (a last delivery read off the timeline's meta: its container exists)
    if state == STATES.absent and digest == nil and meta.last_delivery ~= nil
            and record_count(source) == 0 then
        -- a meta alone, in no set: cooling down (close_found); its due time is the
        -- policy's to tell (the caller adds minimum_delay to last_delivery)
        state = STATES.cooling
    end
    local last_delivery = last_delivery_of(tag, timeline, meta, digest or false)
    local batch_id, batch_cause = nil, nil
    if state == STATES.absent and digest == nil and meta.last_delivery == nil then
        -- the leading edge's batch form (batches.lua): READY with its digest open, or cooling
        local view, id, at = batches.index_view(tag, timeline)
        if view == STATES.ready then
            state, due, batch_id, batch_cause = view, format_float(at), id, CAUSES.immediate
        elseif view == STATES.cooling then
            state, last_delivery, batch_cause = view, at, CAUSES.cooldown
        end
    end
    if last_delivery ~= nil then
        last_delivery = format_float(last_delivery)
    end
    local snooze = snoozes.held(tag, timeline)
    return {
        [INSPECT_REPLY.state] = state,
        [INSPECT_REPLY.due] = due or false,
        [INSPECT_REPLY.last_delivery] = last_delivery or false,
        [INSPECT_REPLY.pending] = record_count(source),
        [INSPECT_REPLY.digest_id] = digest and digest.id or batch_id or false,
        [INSPECT_REPLY.open_records] = digest and digest.records or (batch_id and 1) or 0,
        [INSPECT_REPLY.dropped] = meta.dropped,
        [INSPECT_REPLY.cause] = meta.cause or (digest and digest.cause) or batch_cause or false,
        [INSPECT_REPLY.snoozed] = snooze ~= nil and format_float(snooze) or false,
    }
end
