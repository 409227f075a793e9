// CPU model of the part of Apple's Metal framework that onnx2edge's generated MPSNNGraph code
// and the MetalPerformanceShaders model use. Every public declaration is Apple's Swift
// interface of Metal (MTLDevice.h, MTLCommandQueue.h, MTLCommandBuffer.h, MTLTypes.h,
// MTLTexture.h; Xcode 12 SDK iOS/Metal/*.swift), listed with its source in
// src/onnx2edge/backends/mps/apple_api.py; the model's own classes are `@_spi(Sim)`, invisible
// to generated code. Nothing here touches a GPU.
//
// Semantics kept: work encoded into a command buffer runs only when the buffer is committed
// (MTLCommandBuffer.h: "commit ... Commit a command buffer so it can be executed as soon as
// possible"), completion handlers run after the work, waitUntilCompleted returns after that.

import Foundation

/// MTLTypes.h `MTLSize` (a C struct).
public struct MTLSize {
    public var width: Int
    public var height: Int
    public var depth: Int
    public init() { width = 0; height = 0; depth = 0 }
    public init(width: Int, height: Int, depth: Int) {
        self.width = width
        self.height = height
        self.depth = depth
    }
}

/// MTLTypes.h `MTLOrigin`.
public struct MTLOrigin {
    public var x: Int
    public var y: Int
    public var z: Int
    public init() { x = 0; y = 0; z = 0 }
    public init(x: Int, y: Int, z: Int) {
        self.x = x
        self.y = y
        self.z = z
    }
}

/// MTLTypes.h `MTLRegion`.
public struct MTLRegion {
    public var origin: MTLOrigin
    public var size: MTLSize
    public init() { origin = MTLOrigin(); size = MTLSize() }
    public init(origin: MTLOrigin, size: MTLSize) {
        self.origin = origin
        self.size = size
    }
}

/// MTLTexture.h `MTLTextureUsage` (iOS 9 / macOS 10.11).
public struct MTLTextureUsage: OptionSet {
    public let rawValue: UInt
    public init(rawValue: UInt) { self.rawValue = rawValue }
    public static let unknown = MTLTextureUsage([])
    public static let shaderRead = MTLTextureUsage(rawValue: 1)
    public static let shaderWrite = MTLTextureUsage(rawValue: 2)
    public static let renderTarget = MTLTextureUsage(rawValue: 4)
    public static let pixelFormatView = MTLTextureUsage(rawValue: 0x10)
}

/// MTLCommandBuffer.h `MTLCommandBufferStatus`.
public enum MTLCommandBufferStatus: UInt {
    case notEnqueued = 0, enqueued, committed, scheduled, completed, error
}

/// MTLDevice.h `protocol MTLDevice: NSObjectProtocol`.
public protocol MTLDevice: NSObjectProtocol {
    var name: String { get }
    func makeCommandQueue() -> MTLCommandQueue?
}

/// MTLCommandQueue.h `protocol MTLCommandQueue: NSObjectProtocol`.
public protocol MTLCommandQueue: NSObjectProtocol {
    var device: MTLDevice { get }
    var label: String? { get set }
    func makeCommandBuffer() -> MTLCommandBuffer?
}

/// MTLCommandBuffer.h `typealias MTLCommandBufferHandler = (MTLCommandBuffer) -> Void`.
public typealias MTLCommandBufferHandler = (MTLCommandBuffer) -> Void

/// MTLCommandBuffer.h `protocol MTLCommandBuffer: NSObjectProtocol`.
public protocol MTLCommandBuffer: NSObjectProtocol {
    var device: MTLDevice { get }
    var commandQueue: MTLCommandQueue { get }
    var label: String? { get set }
    var status: MTLCommandBufferStatus { get }
    func commit()
    func waitUntilCompleted()
    func waitUntilScheduled()
    func addCompletedHandler(_ block: @escaping MTLCommandBufferHandler)
}

/// The one CPU "device" of the model.
@_spi(Sim) public final class SimDevice: NSObject, MTLDevice {
    public let name = "onnx2edge CPU model of Metal (not a GPU)"
    public override init() {}
    public func makeCommandQueue() -> MTLCommandQueue? { SimCommandQueue(device: self) }
}

@_spi(Sim) public final class SimCommandQueue: NSObject, MTLCommandQueue {
    public let device: MTLDevice
    public var label: String?
    init(device: MTLDevice) { self.device = device }
    public func makeCommandBuffer() -> MTLCommandBuffer? { SimCommandBuffer(queue: self) }
}

@_spi(Sim) public final class SimCommandBuffer: NSObject, MTLCommandBuffer {
    public let commandQueue: MTLCommandQueue
    public var device: MTLDevice { commandQueue.device }
    public var label: String?
    public private(set) var status: MTLCommandBufferStatus = .notEnqueued
    private var work: [() -> Void] = []
    private var handlers: [MTLCommandBufferHandler] = []

    init(queue: MTLCommandQueue) { commandQueue = queue }

    /// How the CPU model of MPS encodes its kernels (not Apple's API).
    public func simEnqueue(_ work: @escaping () -> Void) {
        precondition(status == .notEnqueued, "encoding into a committed command buffer")
        self.work.append(work)
    }

    public func commit() {
        precondition(status == .notEnqueued, "command buffer committed twice")
        status = .committed
        for w in work { w() }
        work.removeAll()
        status = .completed
        for h in handlers { h(self) }
        handlers.removeAll()
    }

    public func waitUntilCompleted() {}
    public func waitUntilScheduled() {}
    public func addCompletedHandler(_ block: @escaping MTLCommandBufferHandler) {
        handlers.append(block)
    }
}

/// MTLDevice.h `MTLCreateSystemDefaultDevice()`.
public func MTLCreateSystemDefaultDevice() -> MTLDevice? { SimDevice() }
