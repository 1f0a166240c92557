-- controls.lua: the control operations a batch may hold (flush, cancel, cancel_all),
-- applied by ds_add at their place among the records.
-- Holds: controls (one table: the library's top level is near Lua's 200 locals): one
--   handler per control, by its value (controls.flush, ...), and inside it EARLY_CAUSES,
--   undue_early, cancel_records, flush_timeline; written after it by the assembler,
--   CONTROL_HANDLERS (each handler by its control's code).
-- Needs: CAUSES (Python); quiet_until (guards); digest_key, ready_key, timeline_key,
--   waiting_key (keys); format_float, format_timeline_meta, parse_timeline_meta (encoding);
--   call_chunked (helpers); snoozes (snoozes); encode_inline, META, read_container,
--   record_count (containers); mark_cause (container_writes).

local controls = {}
do
    -- The causes that make a timeline due before its cool-down ends (or its schedule's fire):
    -- a flush, flush_at records, an urgent record. They ask for the records pending then.
    local EARLY_CAUSES = {[CAUSES.flushed] = true, [CAUSES.flush_at] = true,
        [CAUSES.urgent] = true}

    -- A cancel left `timeline` (its parsed `meta`) nothing pending: a flush (or flush_at) with
    -- nothing left to flush is a no-op, so the timeline is due as if it had never come.
    -- Behind an open digest its close decides (the cause goes: close_found then sets the
    -- cool-down); otherwise it waits for its schedule's next fire, or for the end of the
    -- cool-down of its last delivery (READY included: the flush's announcement then finds it
    -- WAITING, a stale entry), as a close without the flush would have left it. Once that
    -- cool-down is over the due time stands: the empty digest retires the timeline. Returns
    -- 1 when it took a READY timeline back to WAITING.
    local function undue_early(tag, timeline, meta, policy, now)
        if not EARLY_CAUSES[meta.cause] then
            return 0
        end
        meta.cause = nil
        if redis.call('EXISTS', digest_key(tag, timeline)) == 1 then
            return 0
        end
        local due
        if policy.schedule ~= nil then
            due, meta.cause = policy.schedule, CAUSES.schedule
        elseif meta.last_delivery ~= nil and now < meta.last_delivery + policy.minimum_delay then
            due = quiet_until(policy, meta.last_delivery + policy.minimum_delay, now)
            meta.cause = CAUSES.cooldown
        else
            return 0
        end
        redis.call('ZADD', waiting_key(tag), format_float(due), timeline)
        return redis.call('ZREM', ready_key(tag), timeline)
    end

    -- Removes pending records of `timeline`'s container (all of them, or the one `id`),
    -- keeping its meta (last delivery, marks, cause). Returns how many it removed, and 1 when
    -- that took the timeline from READY back to WAITING (undue_early).
    -- A cancel resets what it cancels: when no pending record is left, no digest will report the
    -- trims before it (counted as capacity drops when trimmed) or records that vanished, so the
    -- meta's counts go with the records (else an empty digest reports them as lost again), and
    -- so does a flush's (or flush_at's) claim to an early digest.
    local function cancel_records(tag, timeline, id, policy, now)
        local key = timeline_key(tag, timeline)
        local container = read_container(key)
        if container.kind == 'none' then
            return 0, 0
        end
        local meta = parse_timeline_meta(container.meta)
        local kept, removed = {}, {}
        for _, record in ipairs(container.records) do
            if id == nil or record.id == id then
                removed[#removed + 1] = record.id
            else
                kept[#kept + 1] = record
            end
        end
        if #removed == 0 then
            return 0, 0
        end
        local count, unready = #removed, 0
        meta.written = math.max(0, meta.written - count)
        if #kept == 0 then
            meta.written, meta.dropped = 0, 0
            unready = undue_early(tag, timeline, meta, policy, now)
            snoozes.hold_again(tag, timeline) -- nothing urgent is left to pass a snooze
            for _, damaged in ipairs(container.damaged) do
                removed[#removed + 1] = damaged
            end
        end
        if container.kind == 'hash' then
            call_chunked('HDEL', key, removed)
            redis.call('HSET', key, META, format_timeline_meta(meta))
        else
            redis.call('SET', key, encode_inline(format_timeline_meta(meta), kept), 'KEEPTTL')
        end
        return count, unready
    end

    -- A flush: a WAITING timeline with pending records becomes READY now (no floor: someone
    -- asked for this digest). Returns 1 when it did. Records pending behind an open digest keep
    -- the flush as their cause, and its close honours it (close_target); a READY timeline not
    -- opened yet needs nothing: its open takes everything pending. Nothing pending: no-op (an
    -- open digest already holds what was asked for).
    local function flush_timeline(tag, timeline, now)
        local source = timeline_key(tag, timeline)
        if record_count(source) == 0 then
            return 0
        end
        if redis.call('ZSCORE', waiting_key(tag), timeline) ~= false then
            mark_cause(source, CAUSES.flushed)
            redis.call('ZREM', waiting_key(tag), timeline)
            redis.call('ZADD', ready_key(tag), format_float(now), timeline)
            return 1
        end
        if redis.call('EXISTS', digest_key(tag, timeline)) == 1 then
            mark_cause(source, CAUSES.flushed)
        end
        return 0
    end

    -- The handlers, one per control: controls.<value> of each member of vocabulary.Control,
    -- called as (tag, timeline, argument, policy, now) with the argument CONTROL_ARGUMENTS reads
    -- (nil: none); each returns its READY change (1: became READY, -1: READY no more, 0: none)
    -- and the records it cancelled. The assembler writes CONTROL_HANDLERS (by code) after them.

    function controls.flush(tag, timeline, _, _, now)
        if snoozes.end_of(tag, timeline, now) ~= nil then
            return 0, 0 -- the snooze holds it: nothing goes out before its end
        end
        return flush_timeline(tag, timeline, now), 0
    end

    function controls.cancel(tag, timeline, id, policy, now)
        local cancelled, unready = cancel_records(tag, timeline, id, policy, now)
        return -unready, cancelled
    end

    function controls.cancel_all(tag, timeline, _, policy, now)
        return controls.cancel(tag, timeline, nil, policy, now)
    end

    function controls.snooze(tag, timeline, ends, policy, now)
        return -snoozes.set(tag, timeline, ends, now, policy.ttl), 0
    end

    function controls.unsnooze(tag, timeline, _, policy, now)
        return -snoozes.set(tag, timeline, nil, now, policy.ttl), 0
    end
end
