-- controls.lua: the control operations a batch may hold (flush, cancel, cancel_all),
-- applied by ds_add at their place among the records.
-- Holds: cancel_records, flush_timeline, apply_control.
-- Needs: CAUSES, CONTROLS (Python); digest_key, ready_key, timeline_key, waiting_key (keys);
--   format_float, format_timeline_meta, parse_timeline_meta (encoding); call_chunked
--   (helpers); encode_inline, META, read_container, record_count (containers); mark_cause
--   (container_writes).

-- Removes pending records of a timeline container (all of them, or the one `id`), keeping
-- its meta (last delivery, marks, cause). Returns how many it removed.
-- A cancel resets what it cancels: when no pending record is left, no digest will report the
-- trims before it (counted as capacity drops when trimmed) or records that vanished, so the
-- meta's counts go with the records (else an empty digest reports them as lost again).
local function cancel_records(key, id)
    local container = read_container(key)
    if container.kind == 'none' then
        return 0
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
        return 0
    end
    local count = #removed
    meta.written = math.max(0, meta.written - count)
    if #kept == 0 then
        meta.written, meta.dropped = 0, 0
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
    return count
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

-- One control operation on a timeline (ds_add applies a batch's controls with it).
-- Returns became ready 1|0 and the records it cancelled.
local function apply_control(tag, operation, timeline, id, now)
    if operation == CONTROLS.flush then
        return flush_timeline(tag, timeline, now), 0
    end
    return 0, cancel_records(timeline_key(tag, timeline), id)
end
