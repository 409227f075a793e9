// CPU model of MetalPerformanceShaders: core types, MPSImage, descriptors and data-source
// protocols. Names, initialisers and semantics follow Apple's headers (MPSCoreTypes.h,
// MPSImage.h, MPSCNNConvolution.h, MPSCNNNeuronType.h, MPSNeuralNetworkTypes.h).
//
// Objective-C `@optional` protocol members cannot be declared in Swift on Linux (no
// Objective-C runtime): they are protocol requirements with defaults in an extension, which
// is how a conforming type sees them (implement it, or get the documented default).

import Foundation
@_exported import Metal

// MARK: - Core types (MPSCoreTypes.h)

public struct MPSOffset: Equatable {
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

public struct MPSImageCoordinate: Equatable {
    public var x: Int
    public var y: Int
    public var channel: Int
    public init() { x = 0; y = 0; channel = 0 }
    public init(x: Int, y: Int, channel: Int) {
        self.x = x
        self.y = y
        self.channel = channel
    }
}

/// MPSCoreTypes.h: how a kernel reads pixels outside its source image.
public enum MPSImageEdgeMode: UInt {
    case zero = 0  // out-of-bounds pixels read as 0
    case clamp = 1  // coordinates are clamped to the edge
    case mirror = 2  // reflected about the edge pixel centre: -1 -> 1 (ONNX Pad 'reflect')
    case mirrorWithEdge = 3  // reflected about the edge: -1 -> 0
    case constant = 4  // read as the kernel's fill value
}

public struct MPSDataType: RawRepresentable, Equatable {
    public var rawValue: UInt32
    public init(rawValue: UInt32) { self.rawValue = rawValue }
    public static let invalid = MPSDataType(rawValue: 0)
    public static let floatBit: UInt32 = 0x1000_0000
    public static let float32 = MPSDataType(rawValue: 0x1000_0000 | 32)
    public static let float16 = MPSDataType(rawValue: 0x1000_0000 | 16)
    public static let int8 = MPSDataType(rawValue: 0x2000_0000 | 8)
    public static let uInt8 = MPSDataType(rawValue: 8)
}

public enum MPSImageFeatureChannelFormat: UInt {
    case none = 0, unorm8, unorm16, float16, float32
}

/// MPSImage.h: `featureChannelsxHeightxWidth` is ONNX's CHW order for one image.
public enum MPSDataLayout: UInt {
    case HeightxWidthxFeatureChannels = 0
    case featureChannelsxHeightxWidth = 1
}

public enum MPSCNNConvolutionWeightsLayout: UInt32 {
    case OHWI = 0
}

public struct MPSKernelOptions: OptionSet {
    public var rawValue: UInt
    public init(rawValue: UInt) { self.rawValue = rawValue }
}

// MARK: - Half precision helpers (storage format of .float16 images and weights)

@inline(__always) func roundToHalf(_ x: Float) -> Float { Float(Float16(x)) }

func halfBitsToFloat(_ p: UnsafeRawPointer, count: Int) -> [Float] {
    let h = p.bindMemory(to: Float16.self, capacity: count)
    return (0..<count).map { Float(h[$0]) }
}

func floatsFrom(_ p: UnsafeRawPointer, count: Int, type: MPSDataType) -> [Float] {
    if type == .float16 { return halfBitsToFloat(p, count: count) }
    precondition(type == .float32, "CPU model of MPS: weights of data type \(type.rawValue) are not modelled")
    return Array(UnsafeBufferPointer(start: p.bindMemory(to: Float.self, capacity: count), count: count))
}

// MARK: - MPSImageDescriptor / MPSImage (MPSImage.h)

open class MPSImageDescriptor: NSObject {
    public var channelFormat: MPSImageFeatureChannelFormat
    public var width: Int
    public var height: Int
    public var featureChannels: Int
    public var numberOfImages: Int = 1

    public init(channelFormat: MPSImageFeatureChannelFormat, width: Int, height: Int, featureChannels: Int) {
        self.channelFormat = channelFormat
        self.width = width
        self.height = height
        self.featureChannels = featureChannels
    }

    public init(
        channelFormat: MPSImageFeatureChannelFormat, width: Int, height: Int, featureChannels: Int,
        numberOfImages: Int, usage: Int
    ) {
        self.channelFormat = channelFormat
        self.width = width
        self.height = height
        self.featureChannels = featureChannels
        self.numberOfImages = numberOfImages
    }
}

/// An MPSImage stores feature channels in slices of 4 (texture2DArray of RGBA pixels,
/// MPSImage.h: "feature channels are stored in slices of 4"): channel c of pixel (x, y) is
/// component c % 4 of slice c / 4. Storage here is `[slice][y][x][4]`; channels past
/// `featureChannels` in the last slice exist and read as 0.
open class MPSImage: NSObject {
    public let device: MTLDevice
    public let width: Int
    public let height: Int
    public let featureChannels: Int
    public let numberOfImages: Int
    public let featureChannelFormat: MPSImageFeatureChannelFormat
    public var label: String?
    /// Not in Apple's API: the texture contents.
    public var simStorage: [Float]

    public var simSlices: Int { (featureChannels + 3) / 4 }

    public init(device: MTLDevice, imageDescriptor: MPSImageDescriptor) {
        precondition(imageDescriptor.numberOfImages == 1, "CPU model of MPS: batches are not modelled")
        self.device = device
        width = imageDescriptor.width
        height = imageDescriptor.height
        featureChannels = imageDescriptor.featureChannels
        numberOfImages = imageDescriptor.numberOfImages
        featureChannelFormat = imageDescriptor.channelFormat
        simStorage = [Float](repeating: 0, count: ((featureChannels + 3) / 4) * width * height * 4)
    }

    @inline(__always) public func simIndex(x: Int, y: Int, channel c: Int) -> Int {
        (((c >> 2) * height + y) * width + x) * 4 + (c & 3)
    }

    /// Values are stored at the image's precision: a .float16 image rounds what it holds.
    public func simStore(_ v: Float, x: Int, y: Int, channel: Int) {
        simStorage[simIndex(x: x, y: y, channel: channel)] = featureChannelFormat == .float16 ? roundToHalf(v) : v
    }

    /// Channels `[0, featureChannels)` as a contiguous HWC buffer with `stride` floats a pixel.
    public func simHWC(stride: Int? = nil) -> [Float] {
        let cs = stride ?? featureChannels
        var out = [Float](repeating: 0, count: width * height * cs)
        simStorage.withUnsafeBufferPointer { s in
            out.withUnsafeMutableBufferPointer { o in
                for c in 0..<min(featureChannels, cs) {
                    let base = (c >> 2) * height * width * 4 + (c & 3)
                    for p in 0..<(width * height) { o[p * cs + c] = s[base + p * 4] }
                }
            }
        }
        return out
    }

    /// Write HWC values (`stride` floats a pixel) into channels starting at `channelOffset`.
    public func simSetHWC(_ hwc: UnsafePointer<Float>, stride: Int, channels: Int, channelOffset: Int = 0) {
        let half = featureChannelFormat == .float16
        simStorage.withUnsafeMutableBufferPointer { s in
            for c in 0..<channels {
                let dc = c + channelOffset
                let base = (dc >> 2) * height * width * 4 + (dc & 3)
                for p in 0..<(width * height) {
                    let v = hwc[p * stride + c]
                    s[base + p * 4] = half ? roundToHalf(v) : v
                }
            }
        }
    }

    /// MPSImage.h readBytes: one image, in the image's pixel type (Float for .float32).
    public func readBytes(_ dataBytes: UnsafeMutableRawPointer, dataLayout: MPSDataLayout, imageIndex: Int) {
        precondition(imageIndex == 0)
        let n = width * height * featureChannels
        let hwc = simHWC()
        var ordered = hwc
        if dataLayout == .featureChannelsxHeightxWidth {
            for p in 0..<(width * height) {
                for c in 0..<featureChannels { ordered[c * width * height + p] = hwc[p * featureChannels + c] }
            }
        }
        if featureChannelFormat == .float16 {
            let h = dataBytes.bindMemory(to: Float16.self, capacity: n)
            for i in 0..<n { h[i] = Float16(ordered[i]) }
        } else {
            let f = dataBytes.bindMemory(to: Float.self, capacity: n)
            for i in 0..<n { f[i] = ordered[i] }
        }
    }

    public func writeBytes(_ dataBytes: UnsafeRawPointer, dataLayout: MPSDataLayout, imageIndex: Int) {
        precondition(imageIndex == 0)
        let n = width * height * featureChannels
        let values = featureChannelFormat == .float16
            ? halfBitsToFloat(dataBytes, count: n) : floatsFrom(dataBytes, count: n, type: .float32)
        var hwc = values
        if dataLayout == .featureChannelsxHeightxWidth {
            for p in 0..<(width * height) {
                for c in 0..<featureChannels { hwc[p * featureChannels + c] = values[c * width * height + p] }
            }
        }
        hwc.withUnsafeBufferPointer { simSetHWC($0.baseAddress!, stride: featureChannels, channels: featureChannels) }
    }
}

open class MPSTemporaryImage: MPSImage {}

// MARK: - Neurons (MPSCNNNeuronType.h, MPSCNNNeuron.h)

public enum MPSCNNNeuronType: Int32 {
    case none = 0, reLU, linear, sigmoid, hardSigmoid, tanH, absolute, softPlus, softSign, ELU,
        pReLU, reLUN, power, exponential, logarithm, geLU
}

open class MPSNNNeuronDescriptor: NSObject, NSCopying {
    public var neuronType: MPSCNNNeuronType = .none
    public var a: Float = 0
    public var b: Float = 0
    public var c: Float = 0
    public var data: Data?

    public override init() {}

    public class func cnnNeuronDescriptor(with neuronType: MPSCNNNeuronType) -> MPSNNNeuronDescriptor {
        cnnNeuronDescriptor(with: neuronType, a: 0, b: 0, c: 0)
    }
    public class func cnnNeuronDescriptor(with neuronType: MPSCNNNeuronType, a: Float) -> MPSNNNeuronDescriptor {
        cnnNeuronDescriptor(with: neuronType, a: a, b: 0, c: 0)
    }
    public class func cnnNeuronDescriptor(with neuronType: MPSCNNNeuronType, a: Float, b: Float) -> MPSNNNeuronDescriptor {
        cnnNeuronDescriptor(with: neuronType, a: a, b: b, c: 0)
    }
    public class func cnnNeuronDescriptor(
        with neuronType: MPSCNNNeuronType, a: Float, b: Float, c: Float
    ) -> MPSNNNeuronDescriptor {
        precondition(neuronType != .pReLU, "use cnnNeuronPReLUDescriptor(with:noCopy:) for PReLU")
        let d = MPSNNNeuronDescriptor()
        d.neuronType = neuronType
        d.a = a
        d.b = b
        d.c = c
        return d
    }
    /// PReLU: one `a` per feature channel, as Float32 values in `data`.
    public class func cnnNeuronPReLUDescriptor(with data: Data, noCopy: Bool) -> MPSNNNeuronDescriptor {
        let d = MPSNNNeuronDescriptor()
        d.neuronType = .pReLU
        d.data = data
        return d
    }

    public func copy(with zone: NSZone? = nil) -> Any {
        let d = MPSNNNeuronDescriptor()
        d.neuronType = neuronType
        d.a = a
        d.b = b
        d.c = c
        d.data = data
        return d
    }
}

/// The functions of MPSCNNNeuronType.h, applied in place to `count` values of one channel.
struct SimNeuron {
    let type: MPSCNNNeuronType
    let a: Float
    let b: Float
    let c: Float
    let perChannelA: [Float]

    init(_ d: MPSNNNeuronDescriptor) {
        type = d.neuronType
        a = d.a
        b = d.b
        c = d.c
        if let data = d.data {
            perChannelA = data.withUnsafeBytes { Array($0.bindMemory(to: Float.self)) }
        } else {
            perChannelA = []
        }
    }

    @inline(__always) func f(_ x: Float, _ channel: Int) -> Float {
        switch type {
        case .none: return x
        case .reLU: return x >= 0 ? x : a * x
        case .linear: return a * x + b
        case .sigmoid: return 1 / (1 + expf(-x))
        case .hardSigmoid: return min(max(a * x + b, 0), 1)
        case .tanH: return a * tanhf(b * x)
        case .absolute: return abs(x)
        case .softPlus: return a * log1pf(expf(b * x))
        case .softSign: return x / (1 + abs(x))
        case .ELU: return x >= 0 ? x : a * (expf(x) - 1)
        case .pReLU: return x >= 0 ? x : perChannelA[channel] * x
        case .reLUN: return min(x >= 0 ? x : a * x, b)
        case .power: return powf(a * x + b, c)
        // MPSCNNNeuronType.h: exponential and logarithm use base e when c == -1.
        case .exponential: return c == -1 ? expf(a * x + b) : powf(c, a * x + b)
        case .logarithm: return c == -1 ? logf(a * x + b) : logf(a * x + b) / logf(c)
        case .geLU: return 0.5 * x * (1 + erff(x * 0.70710678118654752))
        }
    }

    /// Apply to an HWC buffer of `pixels` pixels with `channels` values each.
    func apply(_ p: UnsafeMutablePointer<Float>, pixels: Int, channels: Int) {
        if type == .none { return }
        if type == .reLU && a == 0 {
            for i in 0..<(pixels * channels) { p[i] = max(p[i], 0) }
            return
        }
        for px in 0..<pixels {
            let q = p + px * channels
            for ch in 0..<channels { q[ch] = f(q[ch], ch) }
        }
    }
}

// MARK: - Convolution descriptors (MPSCNNConvolution.h)

open class MPSCNNConvolutionDescriptor: NSObject, NSCopying {
    public var kernelWidth: Int
    public var kernelHeight: Int
    public var inputFeatureChannels: Int
    public var outputFeatureChannels: Int
    public var strideInPixelsX: Int = 1
    public var strideInPixelsY: Int = 1
    public var groups: Int = 1
    public var dilationRateX: Int = 1
    public var dilationRateY: Int = 1
    /// MPSCNNConvolution.h: `MPSNNNeuronDescriptor * __nonnull fusedNeuronDescriptor`, imported
    /// as a non-optional property: only a descriptor can be assigned. What the getter returns
    /// before one is set the header does not say; modelled (a guess) as neuron type none.
    public var fusedNeuronDescriptor: MPSNNNeuronDescriptor = MPSNNNeuronDescriptor.cnnNeuronDescriptor(with: .none)
    var simBatchNorm: (mean: [Float], variance: [Float], gamma: [Float]?, beta: [Float]?, epsilon: Float)?

    public required init(kernelWidth: Int, kernelHeight: Int, inputFeatureChannels: Int, outputFeatureChannels: Int) {
        self.kernelWidth = kernelWidth
        self.kernelHeight = kernelHeight
        self.inputFeatureChannels = inputFeatureChannels
        self.outputFeatureChannels = outputFeatureChannels
    }

    /// MPSCNNConvolution.h: folds inference batch normalization into the convolution.
    public func setBatchNormalizationParametersForInferenceWithMean(
        _ mean: UnsafePointer<Float>?, variance: UnsafePointer<Float>?, gamma: UnsafePointer<Float>?,
        beta: UnsafePointer<Float>?, epsilon: Float
    ) {
        let n = outputFeatureChannels
        func arr(_ p: UnsafePointer<Float>?) -> [Float]? { p.map { Array(UnsafeBufferPointer(start: $0, count: n)) } }
        simBatchNorm = (arr(mean) ?? [Float](repeating: 0, count: n), arr(variance) ?? [Float](repeating: 1, count: n),
                        arr(gamma), arr(beta), epsilon)
    }

    public func copy(with zone: NSZone? = nil) -> Any {
        let d = Self(kernelWidth: kernelWidth, kernelHeight: kernelHeight,
                     inputFeatureChannels: inputFeatureChannels, outputFeatureChannels: outputFeatureChannels)
        d.strideInPixelsX = strideInPixelsX
        d.strideInPixelsY = strideInPixelsY
        d.groups = groups
        d.dilationRateX = dilationRateX
        d.dilationRateY = dilationRateY
        d.fusedNeuronDescriptor = fusedNeuronDescriptor
        d.simBatchNorm = simBatchNorm
        return d
    }
}

/// MPSCNNConvolution.h: depthwise convolution; weights are `[outputFeatureChannels][kH][kW]`
/// ("Weights [inputFeatureChannels][channelMultiplier][kH][kW]"), channel multiplier 1 only.
open class MPSCNNDepthWiseConvolutionDescriptor: MPSCNNConvolutionDescriptor {
    public var channelMultiplier: Int { outputFeatureChannels / inputFeatureChannels }
}

// MARK: - Data sources

/// MPSCNNConvolution.h `MPSCNNConvolutionDataSource <NSCopying, NSObject>`.
public protocol MPSCNNConvolutionDataSource: NSObjectProtocol, NSCopying {
    func dataType() -> MPSDataType
    func descriptor() -> MPSCNNConvolutionDescriptor
    func weights() -> UnsafeMutableRawPointer
    func biasTerms() -> UnsafeMutablePointer<Float>?
    func load() -> Bool
    func purge()
    func label() -> String?
    // @optional in Apple's header:
    func weightsLayout() -> MPSCNNConvolutionWeightsLayout
    func kernelWeightsDataType() -> MPSDataType
}

extension MPSCNNConvolutionDataSource {
    public func weightsLayout() -> MPSCNNConvolutionWeightsLayout { .OHWI }
    public func kernelWeightsDataType() -> MPSDataType { dataType() }
}

/// MPSCNNInstanceNormalization.h `MPSCNNInstanceNormalizationDataSource <NSObject, NSCopying>`.
public protocol MPSCNNInstanceNormalizationDataSource: NSObjectProtocol, NSCopying {
    var numberOfFeatureChannels: Int { get }
    // `initWithCoder:` is @optional in the header, but Swift has no optional initialisers:
    // Apple's Swift interface makes it a required member of the protocol.
    init?(coder aDecoder: NSCoder)
    func gamma() -> UnsafeMutablePointer<Float>?
    func beta() -> UnsafeMutablePointer<Float>?
    func label() -> String?
    // @optional in Apple's header:
    func epsilon() -> Float
    func load() -> Bool
    func purge()
}

extension MPSCNNInstanceNormalizationDataSource {
    public func epsilon() -> Float { 0.001 }
    public func load() -> Bool { true }
    public func purge() {}
}

// MARK: - Handles and padding (MPSNeuralNetworkTypes.h)

public protocol MPSHandle: NSSecureCoding {
    func label() -> String?
}

public struct MPSNNPaddingMethod: OptionSet {
    public var rawValue: UInt
    public init(rawValue: UInt) { self.rawValue = rawValue }
    public static let alignCentered = MPSNNPaddingMethod([])
    public static let alignTopLeft = MPSNNPaddingMethod(rawValue: 1)
    public static let alignBottomRight = MPSNNPaddingMethod(rawValue: 2)
    public static let addRemainderToTopLeft = MPSNNPaddingMethod([])
    public static let addRemainderToTopRight = MPSNNPaddingMethod(rawValue: 1 << 2)
    public static let addRemainderToBottomLeft = MPSNNPaddingMethod(rawValue: 2 << 2)
    public static let addRemainderToBottomRight = MPSNNPaddingMethod(rawValue: 3 << 2)
    public static let sizeValidOnly = MPSNNPaddingMethod([])
    public static let sizeSame = MPSNNPaddingMethod(rawValue: 1 << 4)
    public static let sizeFull = MPSNNPaddingMethod(rawValue: 2 << 4)
    public static let customWhitelistForNodeFusion = MPSNNPaddingMethod(rawValue: 1 << 13)
    public static let custom = MPSNNPaddingMethod(rawValue: 1 << 14)
    public static let excludeEdges = MPSNNPaddingMethod(rawValue: 1 << 15)
}

/// MPSNeuralNetworkTypes.h `MPSNNPadding <NSObject, NSSecureCoding>`.
public protocol MPSNNPadding: NSObjectProtocol, NSSecureCoding {
    func paddingMethod() -> MPSNNPaddingMethod
    // @optional in Apple's header:
    func label() -> String
    func destinationImageDescriptor(
        forSourceImages sourceImages: [MPSImage], sourceStates: [MPSState]?, for kernel: MPSKernel,
        suggestedDescriptor inDescriptor: MPSImageDescriptor
    ) -> MPSImageDescriptor
}

extension MPSNNPadding {
    public func label() -> String { "\(type(of: self))" }
    public func destinationImageDescriptor(
        forSourceImages sourceImages: [MPSImage], sourceStates: [MPSState]?, for kernel: MPSKernel,
        suggestedDescriptor inDescriptor: MPSImageDescriptor
    ) -> MPSImageDescriptor { inDescriptor }
}

open class MPSState: NSObject {}

/// MPSNeuralNetworkTypes.h: a padding policy that is just a padding method.
public final class MPSNNDefaultPadding: NSObject, MPSNNPadding {
    let method: MPSNNPaddingMethod
    init(method: MPSNNPaddingMethod) { self.method = method }
    public static func padding(method: MPSNNPaddingMethod) -> MPSNNDefaultPadding { MPSNNDefaultPadding(method: method) }
    public func paddingMethod() -> MPSNNPaddingMethod { method }
    public static var supportsSecureCoding: Bool { true }
    public func encode(with coder: NSCoder) {}
    public init?(coder: NSCoder) { method = [] }
}
